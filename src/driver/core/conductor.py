"""The driver conductor: the one agent that owns every driver resource.

Each duty cycle it reads the clock once, runs its timers when due (client
liveness, publication drain/linger/unblock, the heartbeat clients watch), takes
a bounded batch of client commands from the to-driver ring buffer, and moves
the publisher limits of IPC publications from their subscribers' positions.
A command it cannot satisfy is answered with ON_ERROR carrying Aeron's error
code, and recorded in the distinct error log; nothing a client sends can stop
the agent.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from driver import local_clients
from driver.clock import EpochClock, NanoClock, SystemEpochClock, SystemNanoClock
from driver.cnc import CncGeneration
from driver.command.current import (
    DestinationByIdMessage,
    NextSessionIdMessage,
    RejectImageMessage,
    StaticCounterMessage,
    TerminateDriverMessage,
    decode_current_command,
)
from driver.command.messages import (
    CorrelatedMessage,
    CounterMessage,
    DestinationMessage,
    PublicationMessage,
    RemoveMessage,
    SubscriptionMessage,
    decode_command,
)
from driver.command.types import CommandType, CurrentCommandType
from driver.concurrent._watches import PositionWatch
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.broadcast import BroadcastTransmitter
from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.concurrent.error_log import DistinctErrorLog
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.concurrent.system_counters import (
    CHANNEL_STATUS_ERRORED,
    PUBLISHER_LIMIT_NAME,
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_NAME,
    PUBLISHER_POS_TYPE_ID,
    DriverSystemCounterId,
    SystemCounterId,
    SystemCounters,
    allocate_client_heartbeat,
)
from driver.core.allocator import PublicationParams, StreamAllocator, int_param
from driver.core.client_proxy import ClientProxy
from driver.core.command_queues import Backlog, CommandQueue
from driver.core.ipc_publication import IpcPublication, PublicationState
from driver.core.links import ClientSession, CounterLink, PublicationLink, SubscriberPosition, SubscriptionLink
from driver.core.network import NetworkResources
from driver.core.network_publication import NetworkPublication
from driver.core.receiver import STALL_NS_DEFAULT, Receiver
from driver.core.sender import Sender
from driver.errors import (
    ChannelEndpointError,
    ControlProtocolError,
    CurrentErrorCode,
    ErrorCode,
    InvalidChannelError,
    MalformedCommandError,
)
from driver.int32 import INT32_MAX as _INT32_MAX
from driver.int32 import INT32_MIN as _INT32_MIN
from driver.logbuffer import descriptor as lbd
from driver.logbuffer._frames import note_committed
from driver.media.endpoints import SendChannelEndpoint
from driver.media.udp_channel import UdpChannel
from driver.uri import ChannelUri

if TYPE_CHECKING:
    from driver.cnc import CncFile
    from driver.config import DriverContext

__all__ = ["DriverConductor"]

_T = TypeVar("_T")

COMMAND_LIMIT = 10
IPC_SOURCE_IDENTITY = "aeron:ipc"
NO_ID_ALLOCATED = -1
NULL_OWNER_ID = -1  # Aeron's NULL_VALUE: a static counter belongs to no client


_ENDPOINT_ERROR_REPORT_INTERVAL_NS = 1_000_000_000


class DriverConductor:
    role_name = "driver-conductor"

    def __init__(
        self,
        ctx: DriverContext,
        cnc: CncFile,
        *,
        nano_clock: NanoClock | None = None,
        epoch_clock: EpochClock | None = None,
        error_handler: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.ctx = self._ctx = ctx
        self._nano_clock = nano_clock or SystemNanoClock()
        self._epoch_clock = epoch_clock or SystemEpochClock()
        self._to_driver = ManyToOneRingBuffer(cnc.to_driver_buffer)
        self.client_proxy = ClientProxy(
            BroadcastTransmitter(cnc.to_clients_buffer), current=cnc.generation is CncGeneration.CURRENT
        )
        self.termination_hook: Callable[[], None] | None = None
        self.counters = CountersManager(
            cnc.counters_metadata_buffer,
            cnc.counters_values_buffer,
            self._epoch_clock.time_ms,
            ctx.counters_free_to_reuse_timeout_ns // 1_000_000,
        )
        self.system_counters = SystemCounters(self.counters, current=cnc.generation is CncGeneration.CURRENT)
        # Today's generation: extra log metadata fields and counter owner ids are written.
        self.is_current = cnc.generation is CncGeneration.CURRENT
        self.allocator = StreamAllocator(ctx, self.counters, is_current=self.is_current)
        self.error_log = DistinctErrorLog(cnc.error_log_buffer, self._epoch_clock.time_ms)
        self._errors = self.system_counters.get(SystemCounterId.ERRORS)
        self._client_timeouts = self.system_counters.get(SystemCounterId.CLIENT_TIMEOUTS)
        self._unblocked_publications = self.system_counters.get(SystemCounterId.UNBLOCKED_PUBLICATIONS)
        self._unblocked_commands = self.system_counters.get(SystemCounterId.UNBLOCKED_COMMANDS)
        self._external_error_handler = error_handler
        self.answered_error_handler: Callable[[BaseException], None] | None = None
        """Takes errors that were also told to a client (see :meth:`record_error`); None: the error handler."""
        sc = self.system_counters
        capacity = ctx.command_queue_capacity
        self._conductor_queue = CommandQueue(sc.get(SystemCounterId.CONDUCTOR_PROXY_FAILS), capacity)
        self._locality = local_clients.ClientLocality()
        """The clients that do not run in this process: while there is one, the sender looks at every log each
        cycle (see ``driver.local_clients``)."""
        self.sender = Sender(
            self._nano_clock,
            CommandQueue(sc.get(SystemCounterId.SENDER_PROXY_FAILS), capacity),
            ctx.send_to_status_poll_ratio,
            self._locality,
        )
        self.receiver = Receiver(
            self._nano_clock,
            CommandQueue(sc.get(SystemCounterId.RECEIVER_PROXY_FAILS), capacity),
            stall_ns=max(STALL_NS_DEFAULT, ctx.image_liveness_timeout_ns // 4),
        )
        deferred = sc.get(DriverSystemCounterId.AGENT_COMMANDS_DEFERRED)
        self._to_sender = Backlog(self.sender.commands, deferred)
        self._to_receiver = Backlog(self.receiver.commands, deferred)
        self.clients: dict[int, ClientSession] = {}
        self._cnc_key: local_clients.DriverKey | None = None
        with contextlib.suppress(OSError):  # no file to know it by: every client is taken for another process's
            self._cnc_key = local_clients.driver_key(cnc.path, cnc.start_timestamp_ms)
        self.ipc_publications: list[IpcPublication] = []
        self.publication_links: list[PublicationLink] = []
        self.subscription_links: list[SubscriptionLink] = []
        self._subscription_by_id: dict[int, SubscriptionLink] = {}
        """The same links by registration id: a server removing one of thousands finds it without a scan."""
        self.spy_links: list[SubscriptionLink] = []
        """The spies among them (few): each new network publication looks for its spies here, not among every
        subscription (a connect storm adds a publication per connection while thousands of links exist)."""
        self.counter_links: list[CounterLink] = []
        self._active_session_ids: set[int] = set()
        self._keepalives = 0
        self.commands_handled = 0
        """Client commands handled so far (keepalives aside): an embedder running the driver can tell that a
        client is talking to it."""
        self._limit_watch = _LimitWatch()
        self._endpoint_error_reported: dict[int, int] = {}  # status indicator id -> when clients were last told
        self._destinations: dict[int, tuple[int, str]] = {}  # destination registration id -> (publication, channel)
        self._next_session_id = random.randint(-(2**31), 2**31 - 1)
        self._timer_interval_ns = ctx.timer_interval_ns
        self._timer_deadline_ns = 0
        self._client_liveness_timeout_ms = ctx.client_liveness_timeout_ns // 1_000_000
        self._host_stall_ns = min(ctx.client_liveness_timeout_ns // 2, _HOST_STALL_MAX_NS)
        self._time_of_last_duty_cycle_ns = 0
        self.host_stalls = 0
        """Duty cycles that came after a gap long enough to be a stall of this process (see :meth:`_on_host_stall`)."""
        self._last_command_consumer_position = 0
        self._time_of_last_command_position_change_ns = 0
        os.makedirs(self.allocator.publications_dir, exist_ok=True)
        self.network = NetworkResources(
            self,
            ctx=ctx,
            allocator=self.allocator,
            system_counters=self.system_counters,
            client_proxy=self.client_proxy,
            error_log=self.error_log,
            sender=self.sender,
            receiver=self.receiver,
        )
        self._dispatch: dict[CommandType, Callable[[object], None]] = {
            CommandType.ADD_PUBLICATION: lambda m: self._on_add_publication(_cast(m, PublicationMessage), False),
            CommandType.ADD_EXCLUSIVE_PUBLICATION: lambda m: self._on_add_publication(
                _cast(m, PublicationMessage), True
            ),
            CommandType.REMOVE_PUBLICATION: lambda m: self._on_remove_publication(_cast(m, RemoveMessage)),
            CommandType.ADD_SUBSCRIPTION: lambda m: self._on_add_subscription(_cast(m, SubscriptionMessage)),
            CommandType.REMOVE_SUBSCRIPTION: lambda m: self._on_remove_subscription(_cast(m, RemoveMessage)),
            CommandType.CLIENT_KEEPALIVE: lambda m: self._on_client_keepalive(_cast(m, CorrelatedMessage)),
            CommandType.CLIENT_CLOSE: lambda m: self._on_client_close(_cast(m, CorrelatedMessage)),
            CommandType.ADD_COUNTER: lambda m: self._on_add_counter(_cast(m, CounterMessage)),
            CommandType.REMOVE_COUNTER: lambda m: self._on_remove_counter(_cast(m, RemoveMessage)),
            CommandType.ADD_DESTINATION: lambda m: self._on_destination(_cast(m, DestinationMessage), True),
            CommandType.REMOVE_DESTINATION: lambda m: self._on_destination(_cast(m, DestinationMessage), False),
            CommandType.ADD_RCV_DESTINATION: lambda m: self._on_receive_destination(_cast(m, DestinationMessage)),
            CommandType.REMOVE_RCV_DESTINATION: lambda m: self._on_receive_destination(_cast(m, DestinationMessage)),
        }
        self._current_dispatch: dict[CurrentCommandType, Callable[[object], None]] = {
            CurrentCommandType.TERMINATE_DRIVER: lambda m: self._on_terminate_driver(_cast(m, TerminateDriverMessage)),
            CurrentCommandType.ADD_STATIC_COUNTER: lambda m: self._on_add_static_counter(
                _cast(m, StaticCounterMessage)
            ),
            CurrentCommandType.REJECT_IMAGE: lambda m: self._on_reject_image(_cast(m, RejectImageMessage)),
            CurrentCommandType.REMOVE_DESTINATION_BY_ID: lambda m: self._on_remove_destination_by_id(
                _cast(m, DestinationByIdMessage)
            ),
            CurrentCommandType.GET_NEXT_AVAILABLE_SESSION_ID: lambda m: self._on_next_session_id(
                _cast(m, NextSessionIdMessage)
            ),
        }

    # -- agent ---------------------------------------------------------------------------------

    def on_start(self) -> None:
        self._to_driver.set_consumer_heartbeat_time(self._epoch_clock.time_ms())

    def has_unread_commands(self) -> bool:
        return self._to_driver.producer_position() != self._to_driver.consumer_position()

    def has_pending_work(self) -> bool:
        """A client command, or a hand-off between the driver's own agents (a SETUP that needs an image, a new
        publication for the sender), waits: the next duty cycle has something to do."""
        return (
            bool(self._conductor_queue)
            or bool(self.sender.commands)
            or bool(self.receiver.commands)
            or bool(self._to_sender)
            or bool(self._to_receiver)
            or self.has_unread_commands()
        )

    def do_work(self) -> int:
        started_ns = self._nano_clock.nano_time()
        last_ns, self._time_of_last_duty_cycle_ns = self._time_of_last_duty_cycle_ns, started_ns
        if last_ns and started_ns - last_ns > self._host_stall_ns:
            self._on_host_stall(started_ns - last_ns)
        # What a full sender or receiver queue did not take goes first, in order. While some still waits,
        # no new client command is read: the to-driver ring holds them, and back-pressures the clients. Nor
        # while an endpoint handed to the sender or receiver to close is still open: a command for its channel
        # would bind a new socket to the port the old one still holds.
        work = self._to_sender.flush() + self._to_receiver.flush()
        if not self._holds_commands():
            # Commands first: after a stall (the process descheduled, the machine loaded), keepalives
            # already waiting in the ring count before liveness is judged. One at a time: the next one waits
            # in the ring as soon as the conductor holds them (a command asked for an endpoint's close).
            read = 0
            ring_read = self._to_driver.read
            on_command = self._on_command
            for _ in range(COMMAND_LIMIT):
                if not ring_read(on_command, 1):
                    break
                read += 1
                if self._holds_commands():
                    break
            if self._keepalives:
                # A keepalive needs no follow-up: it must not keep an otherwise idle driver spinning.
                read -= self._keepalives
                self._keepalives = 0
            self.commands_handled += read
            work += read
        work += self._conductor_queue.drain()
        now_ns = self._nano_clock.nano_time()
        if now_ns >= self._timer_deadline_ns:
            self._timer_deadline_ns = now_ns + self._timer_interval_ns
            work += self._on_timer(now_ns, self._epoch_clock.time_ms())
        work += self.network.update_publisher_limits()
        return work + self._update_ipc_publisher_limits()

    def _holds_commands(self) -> bool:
        """Client commands wait in the to-driver ring: the backlog to the agents, or an endpoint still closing."""
        return bool(self._to_sender or self._to_receiver) or self.network.endpoints_closing

    def _update_ipc_publisher_limits(self) -> int:
        """Move IPC publisher limits; after a change of publications or subscribers, all of them, else only
        those whose subscriber positions moved (one native scan), so hundreds of idle publications cost little."""
        watch = self._limit_watch
        if watch.version != IpcPublication.topology_version or watch.publication_count != len(self.ipc_publications):
            active = [p for p in self.ipc_publications if p.state is PublicationState.ACTIVE]
            entries: list[tuple[AtomicBuffer, int]] = []
            owners: list[IpcPublication] = []
            for publication in active:
                for subscriber in publication.subscribers:
                    entries.append(subscriber.counter.location())
                    owners.append(publication)
            # Positions are noted before the limits are computed from them: a subscriber that moves in between
            # is seen moving on the next cycle. Noted after, that move was lost, and a subscriber with nothing
            # more to read never moved again: its publisher stayed back-pressured for good.
            watch.reset(IpcPublication.topology_version, len(self.ipc_publications), entries, owners)
            return sum(publication.update_publisher_limit() for publication in active)
        if not watch.owners:
            return 0
        moved = watch.positions.changed()
        if not moved:
            return 0
        work = 0
        owners_of = watch.owners
        done: set[int] = set()
        for index in moved:
            publication = owners_of[index]
            if id(publication) not in done and publication.state is PublicationState.ACTIVE:
                done.add(id(publication))
                work += publication.update_publisher_limit()
        return work

    def on_close(self) -> None:
        for publication in self.ipc_publications:
            publication.close()
        self.ipc_publications.clear()
        self.network.close()

    # -- services for the network half (ConductorServices) and the agents --------------------------

    def now_ns(self) -> int:
        return self._nano_clock.nano_time()

    def next_correlation_id(self) -> int:
        return self._to_driver.next_correlation_id()

    def sender_command(self, command: Callable[[], object]) -> None:
        """Hand the sender work; if its queue is full the command waits in order and is offered again."""
        self._to_sender.send(command)

    def receiver_command(self, command: Callable[[], object]) -> None:
        """Hand the receiver work; if its queue is full the command waits in order and is offered again."""
        self._to_receiver.send(command)

    def on_channel_endpoint_error(self, error: ChannelEndpointError) -> None:
        """A send or receive failed on an open endpoint: mark it ERRORED and tell the clients (once a second)."""
        status_id = error.status_indicator_id
        if status_id is None:
            return
        now_ns = self._nano_clock.nano_time()
        last = self._endpoint_error_reported.get(status_id)
        if last is not None and now_ns - last < _ENDPOINT_ERROR_REPORT_INTERVAL_NS:
            return
        self._endpoint_error_reported[status_id] = now_ns
        with contextlib.suppress(ValueError):
            AtomicCounter(self.counters.values_buffer, status_id).set_ordered(CHANNEL_STATUS_ERRORED)
        self.client_proxy.on_error(status_id, ErrorCode.CHANNEL_ENDPOINT_ERROR, str(error))

    def conductor_command(self, command: Callable[[], object]) -> bool:
        """Queue work for the conductor's own thread (from the sender or receiver); False if the queue is full
        (counted): for work the network asks for, which the next packet asks for again."""
        return self._conductor_queue.offer(command)

    def after_teardown(self, command: Callable[[], object]) -> None:
        """Sender or receiver: the conductor's part of a teardown they finished (free the log, counters, session
        id); never refused, so nothing is forgotten before its teardown ran and nothing torn down is leaked."""
        self._conductor_queue.put(command)

    def release_session_id(self, session_id: int) -> None:
        self._active_session_ids.discard(session_id)

    def delete_file(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.record_error(exc)

    # The IPC path's shorthands for the allocator (the network half uses the allocator itself).

    def record_error(self, error: BaseException, *, answered: bool = False) -> None:
        """Errors of the driver's own agents: counted, logged distinctly, and passed on.

        ``answered``: the error was also sent to the client concerned (a command it made failed), which raises
        it as its own typed error; ``answered_error_handler`` (when set) takes it instead of the error handler.
        """
        self._errors.increment()
        self.error_log.record(error)
        handler = self.answered_error_handler if answered else None
        if handler is None:
            handler = self._external_error_handler
        if handler is not None:
            handler(error)

    # -- commands ------------------------------------------------------------------------------

    def _on_command(self, msg_type_id: int, buffer: AtomicBuffer, index: int, length: int) -> None:
        correlation_id = 0
        try:
            if length >= 16:
                correlation_id = buffer.get_long(index + 8)
            current = decode_current_command(msg_type_id, buffer, index, length)
            if current is not None:
                self._current_dispatch[current[0]](current[1])
                return
            if msg_type_id not in _COMMAND_TYPE_IDS:
                raise ControlProtocolError(
                    CurrentErrorCode.UNKNOWN_COMMAND_TYPE_ID, f"command=0x{msg_type_id:x} unknown"
                )
            command_type, message = decode_command(msg_type_id, buffer, index, length)
            self._dispatch[command_type](message)
        except ControlProtocolError as exc:
            self._reply_error(correlation_id, exc.error_code, str(exc), exc)
        except InvalidChannelError as exc:
            self._reply_error(correlation_id, ErrorCode.INVALID_CHANNEL, str(exc), exc)
        except ChannelEndpointError as exc:
            # As 1.15.1: a socket that cannot open while adding answers the command itself
            # (GENERIC_ERROR); CHANNEL_ENDPOINT_ERROR is keyed by a status counter id instead.
            self._reply_error(correlation_id, ErrorCode.GENERIC_ERROR, f"channel error - {exc}", exc)
        except MalformedCommandError as exc:
            self._reply_error(correlation_id, CurrentErrorCode.MALFORMED_COMMAND, str(exc), exc)
        except Exception as exc:
            self._reply_error(correlation_id, ErrorCode.GENERIC_ERROR, f"{type(exc).__name__}: {exc}", exc)

    def _reply_error(
        self, correlation_id: int, code: ErrorCode | CurrentErrorCode, message: str, exc: BaseException
    ) -> None:
        self.record_error(exc, answered=True)
        self.client_proxy.on_error(correlation_id, code, message)

    def _client(self, client_id: int) -> ClientSession:
        client = self.clients.get(client_id)
        if client is None:
            now_ms = self._epoch_clock.time_ms()
            heartbeat = AtomicCounter(
                self.counters.values_buffer, allocate_client_heartbeat(self.counters, client_id), self.counters
            )
            client = ClientSession(client_id, self._client_liveness_timeout_ms, now_ms, heartbeat)
            self.clients[client_id] = client
            if self._cnc_key is None or not local_clients.is_local(self._cnc_key, client_id):
                self._locality.others.add(client_id)
        return client

    def _parse(self, channel: str, *, spy: bool = False) -> tuple[ChannelUri, UdpChannel | None]:
        """The channel, and its UDP side (None for IPC); ``spy``: an ``aeron-spy:`` prefix is allowed (the UDP
        side is then the spied channel's)."""
        uri = ChannelUri.parse(channel)
        if uri.is_spy:
            if not spy:
                raise ControlProtocolError(
                    ErrorCode.INVALID_CHANNEL,
                    f"channel {channel!r}: the aeron-spy: prefix is for subscriptions (a spy reads a publication)",
                )
            return uri, UdpChannel.parse(uri.without_spy_prefix())
        if uri.media == "ipc":
            return uri, None
        return uri, UdpChannel.parse(uri)

    def _on_add_publication(self, msg: PublicationMessage, is_exclusive: bool) -> None:
        uri, udp = self._parse(msg.channel)
        params = PublicationParams(uri, self._ctx, is_exclusive)
        client = self._client(msg.client_id)
        if udp is not None:
            self._on_add_network_publication(msg, udp, params, client, is_exclusive)
            return
        publication = None
        if not is_exclusive:
            publication = next(
                (
                    p
                    for p in self.ipc_publications
                    if p.stream_id == msg.stream_id and not p.is_exclusive and p.state is PublicationState.ACTIVE
                ),
                None,
            )
        if publication is None:
            publication = self._new_ipc_publication(msg, params, is_exclusive)
        else:
            self._confirm_match(publication, uri, params)
        link = PublicationLink(msg.correlation_id, client, publication)
        publication.inc_ref()
        self.publication_links.append(link)
        new_positions = [
            self._link_ipc_subscription(publication, sub)
            for sub in self.subscription_links
            if sub.matches(publication) and not sub.is_linked(publication)
        ]
        self.client_proxy.on_publication_ready(
            correlation_id=msg.correlation_id,
            registration_id=publication.registration_id,
            stream_id=publication.stream_id,
            session_id=publication.session_id,
            log_file_name=publication.log_file_name,
            publisher_limit_counter_id=publication.publisher_limit.id,
            channel_status_indicator_id=NO_ID_ALLOCATED,
            is_exclusive=is_exclusive,
        )
        for position in new_positions:
            self._send_available_image(publication, position)

    def _on_add_network_publication(
        self,
        msg: PublicationMessage,
        udp: UdpChannel,
        params: PublicationParams,
        client: ClientSession,
        is_exclusive: bool,
    ) -> None:
        publication = None if is_exclusive else self.network.find_shared_publication(udp, msg.stream_id)
        if publication is None:
            session_id = self._allocate_session_id(params)
            initial_term_id = (
                params.initial_term_id if params.initial_term_id is not None else random.randint(-(2**31), 2**31 - 1)
            )
            publication = self.network.add_publication(
                registration_id=msg.correlation_id,
                channel=udp,
                channel_text=msg.channel,
                stream_id=msg.stream_id,
                session_id=session_id,
                initial_term_id=initial_term_id,
                params=params,
                is_exclusive=is_exclusive,
                client_id=msg.client_id,
            )
            self._active_session_ids.add(session_id)
            spies = self.network.link_spies(publication)
        else:
            self._confirm_match(publication, udp.channel_uri, params)
            spies = []
        publication.inc_ref()
        self.publication_links.append(PublicationLink(msg.correlation_id, client, publication))
        endpoint = publication.endpoint
        assert isinstance(endpoint, SendChannelEndpoint)
        self.client_proxy.on_publication_ready(
            correlation_id=msg.correlation_id,
            registration_id=publication.registration_id,
            stream_id=publication.stream_id,
            session_id=publication.session_id,
            log_file_name=publication.log_file_name,
            publisher_limit_counter_id=publication.publisher_limit.id,
            channel_status_indicator_id=endpoint.status_indicator.id,
            is_exclusive=is_exclusive,
        )
        for position in spies:
            self._send_available_spy_image(position)

    def _send_available_spy_image(self, position: SubscriberPosition) -> None:
        """A spy's image: the network publication's own log, named as Aeron names it (``aeron:ipc``)."""
        publication = position.publication
        assert isinstance(publication, NetworkPublication)
        self.client_proxy.on_available_image(
            correlation_id=publication.registration_id,
            session_id=publication.session_id,
            stream_id=publication.stream_id,
            subscription_registration_id=position.subscription.registration_id,
            subscriber_position_id=position.counter.id,
            log_file_name=publication.log_file_name,
            source_identity=IPC_SOURCE_IDENTITY,
        )

    def _allocate_session_id(self, params: PublicationParams) -> int:
        if params.session_id is None:
            return self._next_available_session_id()
        if params.session_id in self._active_session_ids:
            raise ControlProtocolError(ErrorCode.GENERIC_ERROR, f"session-id={params.session_id} is already in use")
        return params.session_id

    def _confirm_match(
        self, publication: IpcPublication | NetworkPublication, uri: ChannelUri, params: PublicationParams
    ) -> None:
        if uri.get("term-length") is not None and params.term_length != publication.term_length:
            raise ControlProtocolError(
                ErrorCode.GENERIC_ERROR,
                f"term-length={params.term_length} does not match existing publication's {publication.term_length}",
            )
        mtu = publication.mtu_length if isinstance(publication, IpcPublication) else publication.mtu
        if uri.get("mtu") is not None and params.mtu != mtu:
            raise ControlProtocolError(
                ErrorCode.GENERIC_ERROR,
                f"mtu={params.mtu} does not match existing publication's {mtu}",
            )
        if params.session_id is not None and params.session_id != publication.session_id:
            raise ControlProtocolError(
                ErrorCode.GENERIC_ERROR,
                f"session-id={params.session_id} does not match existing publication's {publication.session_id}",
            )

    def _next_available_session_id(self) -> int:
        low, high = self._ctx.publication_reserved_session_id_low, self._ctx.publication_reserved_session_id_high
        while True:
            session_id = self._next_session_id
            self._next_session_id = lbd.int32(session_id + 1)
            if low <= session_id <= high:
                # Leave the reserved range at a random point, not at high + 1: drivers started alike would
                # otherwise all hand out the same first id, and images are keyed by session and stream.
                self._next_session_id = _random_outside(low, high)
                continue
            if session_id not in self._active_session_ids:
                return session_id

    def _new_ipc_publication(
        self, msg: PublicationMessage, params: PublicationParams, is_exclusive: bool
    ) -> IpcPublication:
        registration_id = msg.correlation_id
        session_id = self._allocate_session_id(params)
        initial_term_id = (
            params.initial_term_id if params.initial_term_id is not None else random.randint(-(2**31), 2**31 - 1)
        )
        window = self._ctx.ipc_publication_term_window_length_for(params.term_length)
        log = self.allocator.create_publication_log(
            registration_id,
            session_id,
            msg.stream_id,
            initial_term_id,
            params,
            self.allocator.publication_metadata(params, is_exclusive, window),
        )
        try:
            publisher_position = self.allocator.stream_counter(
                PUBLISHER_POS_NAME,
                PUBLISHER_POS_TYPE_ID,
                registration_id,
                session_id,
                msg.stream_id,
                msg.channel,
                owner_id=msg.client_id,
            )
            publisher_limit = self.allocator.stream_counter(
                PUBLISHER_LIMIT_NAME,
                PUBLISHER_LIMIT_TYPE_ID,
                registration_id,
                session_id,
                msg.stream_id,
                msg.channel,
                owner_id=msg.client_id,
            )
        except BaseException:
            log.close()
            self.delete_file(log.name)
            raise
        publication = IpcPublication(
            registration_id=registration_id,
            channel=msg.channel,
            session_id=session_id,
            stream_id=msg.stream_id,
            log=log,
            publisher_limit=publisher_limit,
            publisher_position=publisher_position,
            term_window_length=self._ctx.ipc_publication_term_window_length_for(params.term_length),
            unblock_timeout_ns=self._ctx.publication_unblock_timeout_ns,
            linger_timeout_ns=params.linger_ns,
            now_ns=self._nano_clock.nano_time(),
            is_exclusive=is_exclusive,
            unblocked_publications=self._unblocked_publications,
        )
        position = publication.producer_position()
        publisher_position.set_ordered(position)
        publisher_limit.set_ordered(position)
        self.ipc_publications.append(publication)
        self._active_session_ids.add(session_id)
        return publication

    def _link_ipc_subscription(self, publication: IpcPublication, sub: SubscriptionLink) -> SubscriberPosition:
        counter = self.allocator.subscriber_position(sub, publication.session_id, publication.join_position())
        position = SubscriberPosition(sub, publication, counter)
        publication.add_subscriber(position)
        sub.positions[publication.registration_id] = position
        return position

    def _send_available_image(self, publication: IpcPublication, position: SubscriberPosition) -> None:
        self.client_proxy.on_available_image(
            correlation_id=publication.registration_id,
            session_id=publication.session_id,
            stream_id=publication.stream_id,
            subscription_registration_id=position.subscription.registration_id,
            subscriber_position_id=position.counter.id,
            log_file_name=publication.log_file_name,
            source_identity=IPC_SOURCE_IDENTITY,
        )

    def _on_remove_publication(self, msg: RemoveMessage) -> None:
        link = next((lk for lk in self.publication_links if lk.registration_id == msg.registration_id), None)
        if link is None:
            raise ControlProtocolError(ErrorCode.UNKNOWN_PUBLICATION, f"unknown publication: {msg.registration_id}")
        self.publication_links.remove(link)
        self._release(link.publication, self._nano_clock.nano_time())
        self.client_proxy.on_operation_success(msg.correlation_id)

    def _on_add_subscription(self, msg: SubscriptionMessage) -> None:
        uri, udp = self._parse(msg.channel, spy=True)
        session = uri.get("session-id")
        client = self._client(msg.client_id)
        ctx = self._ctx
        sub = SubscriptionLink(
            msg.correlation_id,
            client,
            msg.channel,
            msg.stream_id,
            int(session.removeprefix("tag:")) if session else None,
            max_term_length=min(
                int_param(uri, "max-term-length", ctx.receiver_max_term_length), ctx.receiver_max_term_length
            ),
            max_images=min(
                int_param(uri, "max-images", ctx.receiver_max_images_per_subscription),
                ctx.receiver_max_images_per_subscription,
            ),
            max_images_per_source=min(
                int_param(uri, "max-images-per-source", ctx.receiver_max_images_per_source),
                ctx.receiver_max_images_per_source,
            ),
            sparse=uri.get("sparse") == "true",
            evict_silent=uri.get("evict-silent") == "true",
            reliable=uri.get("reliable") != "false",
            spied_channel=udp.canonical_form if uri.is_spy and udp is not None else None,
        )
        self.subscription_links.append(sub)
        self._subscription_by_id[sub.registration_id] = sub
        if sub.is_spy:
            self.spy_links.append(sub)
            try:
                positions = self.network.add_spy(sub)
            except BaseException:  # no counter left: nothing of the spy stays
                self._unlink_subscription(sub)
                raise
            self.client_proxy.on_subscription_ready(msg.correlation_id, NO_ID_ALLOCATED)
            for position in positions:
                self._send_available_spy_image(position)
            return
        if udp is not None:
            try:
                endpoint = self.network.add_subscription(sub, udp)
            except BaseException:
                self.subscription_links.remove(sub)
                del self._subscription_by_id[sub.registration_id]
                raise
            self.client_proxy.on_subscription_ready(msg.correlation_id, endpoint.status_indicator.id)
            return
        self.client_proxy.on_subscription_ready(msg.correlation_id, NO_ID_ALLOCATED)
        for publication in self.ipc_publications:
            if publication.state is PublicationState.ACTIVE and sub.matches(publication):
                self._send_available_image(publication, self._link_ipc_subscription(publication, sub))

    def _on_remove_subscription(self, msg: RemoveMessage) -> None:
        sub = self._subscription_by_id.get(msg.registration_id)
        if sub is None:
            raise ControlProtocolError(ErrorCode.UNKNOWN_SUBSCRIPTION, f"unknown subscription: {msg.registration_id}")
        self._unlink_subscription(sub)
        self.client_proxy.on_operation_success(msg.correlation_id)

    def _unlink_subscription(self, sub: SubscriptionLink) -> None:
        self.subscription_links.remove(sub)
        self._subscription_by_id.pop(sub.registration_id, None)
        if sub.is_spy:
            self.spy_links.remove(sub)
        if sub.endpoint is not None:
            self.network.remove_subscription(sub)
            return
        if sub.is_spy:
            self.network.remove_spy(sub)
            return
        for position in sub.positions.values():
            publication = position.publication
            if isinstance(publication, IpcPublication) and position in publication.subscribers:
                publication.remove_subscriber(position)
        sub.positions.clear()

    def _on_client_keepalive(self, msg: CorrelatedMessage) -> None:
        self._keepalives += 1
        client = self.clients.get(msg.client_id)
        if client is not None:
            client.on_keepalive(self._epoch_clock.time_ms())

    def _on_client_close(self, msg: CorrelatedMessage) -> None:
        client = self.clients.get(msg.client_id)
        if client is not None:
            self._release_client(client)

    def _on_add_counter(self, msg: CounterMessage) -> None:
        client = self._client(msg.client_id)
        counter_id = self.counters.allocate(
            msg.label, msg.type_id, msg.key, registration_id=msg.correlation_id, owner_id=msg.client_id
        )
        counter = AtomicCounter(self.counters.values_buffer, counter_id, self.counters)
        self.counter_links.append(CounterLink(msg.correlation_id, client, counter))
        self.client_proxy.on_counter_ready(msg.correlation_id, counter.id)

    def _on_remove_counter(self, msg: RemoveMessage) -> None:
        link = next((lk for lk in self.counter_links if lk.registration_id == msg.registration_id), None)
        if link is None:
            raise ControlProtocolError(ErrorCode.UNKNOWN_COUNTER, f"unknown counter: {msg.registration_id}")
        self.counter_links.remove(link)
        self.client_proxy.on_operation_success(msg.correlation_id)
        self.client_proxy.on_unavailable_counter(link.registration_id, link.counter.id)
        link.counter.close()

    def _on_destination(self, msg: DestinationMessage, add: bool) -> None:
        self.network.on_destination(msg.registration_correlation_id, msg.channel, add)
        if add:
            # Today's clients name a destination by the correlation id that added it.
            self._destinations[msg.correlation_id] = (msg.registration_correlation_id, msg.channel)
        else:
            for key, (publication_id, channel) in list(self._destinations.items()):
                if publication_id == msg.registration_correlation_id and channel == msg.channel:
                    del self._destinations[key]
        self.client_proxy.on_operation_success(msg.correlation_id)

    # -- today's commands (CnC 0.2.0 clients) ----------------------------------------------------

    def _on_terminate_driver(self, msg: TerminateDriverMessage) -> None:
        """As today's drivers: terminate only if the validator accepts the token; never answer."""
        validator = self._ctx.termination_validator
        if validator == "allow":
            valid = True
        elif validator.startswith("token:"):
            valid = msg.token == validator.removeprefix("token:").encode()
        else:
            valid = False
        if valid and self.termination_hook is not None:
            self.termination_hook()

    def _on_add_static_counter(self, msg: StaticCounterMessage) -> None:
        self._client(msg.client_id)
        counter_id = self.counters.find_by_registration_id(msg.type_id, msg.registration_id)
        if counter_id != NO_ID_ALLOCATED:
            if self.counters.get_counter_owner_id(counter_id) != NULL_OWNER_ID:
                raise ControlProtocolError(
                    CurrentErrorCode.GENERIC_ERROR,
                    f"cannot add static counter, because a non-static counter exists (counterId={counter_id}) "
                    f"for typeId={msg.type_id} and registrationId={msg.registration_id}",
                )
        else:
            counter_id = self.counters.allocate(
                msg.label, msg.type_id, msg.key, registration_id=msg.registration_id, owner_id=NULL_OWNER_ID
            )
        self.client_proxy.on_static_counter(msg.correlation_id, counter_id)

    def _on_reject_image(self, msg: RejectImageMessage) -> None:
        image = self.network.find_image(msg.image_correlation_id)
        if image is None and not any(p.registration_id == msg.image_correlation_id for p in self.ipc_publications):
            raise ControlProtocolError(
                CurrentErrorCode.GENERIC_ERROR, f"Unable to resolve image for correlationId={msg.image_correlation_id}"
            )
        if image is None:
            raise ControlProtocolError(
                CurrentErrorCode.NOT_SUPPORTED,
                f"REJECT_IMAGE is not supported for IPC (image {msg.image_correlation_id})",
            )
        # The receiver thread reads the flag on its next status message: ERR frames replace SMs.
        image.reject(msg.reason)
        self.receiver_command(lambda: image.wake())  # its status messages were timed natively: track it now
        self.client_proxy.on_operation_success(msg.correlation_id)

    def _on_remove_destination_by_id(self, msg: DestinationByIdMessage) -> None:
        entry = self._destinations.get(msg.destination_registration_id)
        if entry is None or entry[0] != msg.resource_registration_id:
            raise ControlProtocolError(
                ErrorCode.UNKNOWN_PUBLICATION,
                f"unknown destination {msg.destination_registration_id} of publication {msg.resource_registration_id}",
            )
        self.network.on_destination(msg.resource_registration_id, entry[1], False)
        del self._destinations[msg.destination_registration_id]
        self.client_proxy.on_operation_success(msg.correlation_id)

    def _on_next_session_id(self, msg: NextSessionIdMessage) -> None:
        in_use = {p.session_id for p in self.ipc_publications if p.stream_id == msg.stream_id}
        in_use.update(self.network.session_ids(msg.stream_id))
        for _ in range(1 << 16):
            session_id = self._next_available_session_id()
            if session_id not in in_use:
                break
        self.client_proxy.on_next_available_session_id(msg.correlation_id, session_id)

    def _on_receive_destination(self, msg: DestinationMessage) -> None:
        raise ControlProtocolError(
            ErrorCode.UNKNOWN_SUBSCRIPTION,
            f"subscription {msg.registration_correlation_id}: multi-destination subscriptions are not supported",
        )

    # -- timers --------------------------------------------------------------------------------

    def _on_timer(self, now_ns: int, now_ms: int) -> int:
        self._to_driver.set_consumer_heartbeat_time(now_ms)
        work = self._check_clients(now_ms)
        for publication in list(self.ipc_publications):
            if publication.on_time_event(now_ns):
                self._transition_to_linger(publication)
            elif publication.state is PublicationState.DONE:
                self._cleanup_publication(publication)
                work += 1
        self.network.on_timer(now_ns)
        self._check_for_blocked_commands(now_ns)
        return work

    def _on_host_stall(self, gap_ns: int) -> None:
        """This driver was not run for ``gap_ns`` (SIGSTOP, a long GC pause, a VM migration, a starved host).

        Whatever its clients did meanwhile, we did not look: their silence over the gap is ours, not theirs.
        Each client's liveness (and the blocked-command watch) is moved on by the gap, so a stall shorter than
        the liveness timeout costs nothing; a client that really died is still timed out, one interval later.
        """
        self.host_stalls += 1
        gap_ms = gap_ns // 1_000_000
        now_ms = self._epoch_clock.time_ms()
        for client in self.clients.values():
            client.time_of_last_keepalive_ms = min(client.time_of_last_keepalive_ms + gap_ms, now_ms)
        self._time_of_last_command_position_change_ns += gap_ns

    def _check_clients(self, now_ms: int) -> int:
        timed_out = [c for c in self.clients.values() if c.has_timed_out(now_ms)]
        for client in timed_out:
            self._client_timeouts.increment()
            self.client_proxy.on_client_timeout(client.client_id)
            self._release_client(client)
        return len(timed_out)

    def _release(self, publication: IpcPublication | NetworkPublication, now_ns: int) -> None:
        publication.dec_ref(now_ns)
        if isinstance(publication, NetworkPublication):
            self.network.on_released(publication, now_ns)

    def _release_client(self, client: ClientSession) -> None:
        """Free everything a closed or dead client held."""
        now_ns = self._nano_clock.nano_time()
        for link in [lk for lk in self.publication_links if lk.client is client]:
            self.publication_links.remove(link)
            self._release(link.publication, now_ns)
        for sub in [s for s in self.subscription_links if s.client is client]:
            self._unlink_subscription(sub)
        for counter_link in [lk for lk in self.counter_links if lk.client is client]:
            self.counter_links.remove(counter_link)
            self.client_proxy.on_unavailable_counter(counter_link.registration_id, counter_link.counter.id)
            counter_link.counter.close()
        del self.clients[client.client_id]
        client.close()
        if client.client_id in self._locality.others:
            self._locality.others.remove(client.client_id)
            # What it wrote after the sender's last look counts as written here: the next cycle looks once more.
            note_committed()

    def _transition_to_linger(self, publication: IpcPublication) -> None:
        for sub in self.subscription_links:
            position = sub.positions.pop(publication.registration_id, None)
            if position is not None:
                self.client_proxy.on_unavailable_image(
                    publication.registration_id, sub.registration_id, publication.stream_id, sub.channel
                )

    def _cleanup_publication(self, publication: IpcPublication) -> None:
        self.ipc_publications.remove(publication)
        self._active_session_ids.discard(publication.session_id)
        for sub in self.subscription_links:
            sub.positions.pop(publication.registration_id, None)
        publication.close()
        self.delete_file(publication.log.name)

    def _check_for_blocked_commands(self, now_ns: int) -> None:
        """Unblock the to-driver ring when a client claimed a record and has not finished it for the client
        liveness timeout (it died mid-write).

        What is timed is how long the ring has been held back, not how long since it last moved: a ring with
        nothing in it, or one the conductor holds back itself (its backlog waits, or an endpoint is closing),
        starts the watch again. Timed
        from the last move, a ring quiet for longer than the timeout took the next client to be caught mid-write
        at a timer tick (a thread switch there is enough) for a dead one, and turned its live command to
        padding: that command was never answered.
        """
        ring = self._to_driver
        consumer_position = ring.consumer_position()
        if (
            consumer_position != self._last_command_consumer_position
            or ring.producer_position() == consumer_position
            or self._holds_commands()
        ):
            self._last_command_consumer_position = consumer_position
            self._time_of_last_command_position_change_ns = now_ns
            return
        if now_ns - self._time_of_last_command_position_change_ns > self._ctx.client_liveness_timeout_ns and (
            ring.unblock()
        ):
            self._unblocked_commands.increment()


_HOST_STALL_MAX_NS = 1_000_000_000
"""A duty cycle this late (or half the client liveness timeout, if shorter) means the driver itself stalled."""

_COMMAND_TYPE_IDS = frozenset(int(t) for t in CommandType)


def _cast(message: object, cls: type[_T]) -> _T:
    assert isinstance(message, cls)
    return message


def _random_outside(low: int, high: int) -> int:
    """A random int32 outside ``[low, high]`` (the reserved session ids)."""
    below = low - _INT32_MIN
    above = _INT32_MAX - high
    if below + above <= 0:
        raise ControlProtocolError(ErrorCode.GENERIC_ERROR, "every session id is reserved")
    pick = random.randrange(below + above)
    return _INT32_MIN + pick if pick < below else high + 1 + pick - below


class _LimitWatch:
    """The subscriber positions of active IPC publications (values noted at the last look) and their owners."""

    __slots__ = ("owners", "positions", "publication_count", "version")

    def __init__(self) -> None:
        self.version = -1
        self.publication_count = -1
        self.positions = PositionWatch([])
        self.owners: list[IpcPublication] = []

    def reset(
        self,
        version: int,
        publication_count: int,
        entries: list[tuple[AtomicBuffer, int]],
        owners: list[IpcPublication],
    ) -> None:
        self.version = version
        self.publication_count = publication_count
        self.positions = PositionWatch(entries)
        self.owners = owners
