"""The client conductor: talks to the driver and owns the client's resources (Aeron 1.15.1 ``ClientConductor``).

Theory of operation
-------------------
Commands go to the driver through the to-driver ring buffer (:class:`DriverProxy`);
the driver answers, and announces images and counters, on the to-clients
broadcast buffer, which every client reads. The conductor's *service* step reads
that buffer, keeps only what concerns this client (its pending correlation ids
and its subscriptions), proves it is alive every ``keepalive_interval_ns`` and
watches the driver's heartbeat.

The client speaks the generation of the cnc.dat it found. Against a 1.15.1
(CnC 15) driver it sends CLIENT_KEEPALIVE; against today's (CnC 0.2.0) it does
what today's clients do: it finds the client-heartbeat counter (type 11, key =
client id) the driver allocates on its first command and stamps epoch ms into
it, reads ON_ERROR codes in today's table and understands today's responses
(ON_STATIC_COUNTER, ON_NEXT_AVAILABLE_SESSION_ID, ON_PUBLICATION_ERROR).

One re-entrant lock guards all conductor state. Whoever holds it may service:
the conductor's own agent thread (``do_work`` only *tries* the lock), or a
caller waiting for a response — a blocking ``add_publication`` drives the
conductor itself while it waits, as Java's ``awaitResponse`` does, so it does
not depend on the agent thread's idle sleep. Unlike Java, responses are matched
against a table of pending requests rather than the single awaited id, so the
lock is not held while waiting: other threads (and asyncio tasks) can issue
commands at the same time, and an async caller can wait without blocking its
event loop.

Failure handling follows 1.15.1: ON_ERROR fails the request (RegistrationError);
no answer within the driver timeout raises DriverTimeoutError; a driver
heartbeat older than the driver timeout, or ON_CLIENT_TIMEOUT for this client,
terminates the client: every resource is closed (publications then return
CLOSED, polls 0), every pending call fails, and the error handler hears why.

Log buffers are mapped once per registration and reference counted;
when the count drops to zero the mapping lingers for ``resource_linger`` before
it is unmapped, so a poll or offer racing with a close never touches unmapped
memory.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from driver import local_clients
from driver.client.counter import Counter
from driver.client.driver_proxy import DriverProxy
from driver.client.publication import ConcurrentPublication, ExclusivePublication, Publication
from driver.client.requests import PendingRequest
from driver.client.subscription import AvailableImageHandler, Image, Subscription, UnavailableImageHandler
from driver.cnc import CncFile, CncGeneration
from driver.command import (
    ClientTimeout,
    CounterUpdate,
    ErrorResponse,
    ImageMessage,
    ImageReady,
    OperationSucceeded,
    PublicationReady,
    ResponseType,
    SubscriptionReady,
)
from driver.command.current import PublicationErrorResponse, StaticCounterResponse
from driver.command.types import CurrentCommandType
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.broadcast import BroadcastReceiver, CopyBroadcastReceiver
from driver.concurrent.counters import (
    COUNTER_LENGTH,
    MAX_KEY_LENGTH,
    MAX_LABEL_LENGTH,
    RECORD_ALLOCATED,
    CountersReader,
)
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.concurrent.system_counters import CLIENT_HEARTBEAT_TYPE_ID
from driver.doorbell import DoorbellRinger
from driver.errors import (
    AgentTerminationError,
    ChannelEndpointError,
    DeadDriverError,
    DriverClientError,
    DriverClientTimeoutError,
    DriverError,
    DriverTimeoutError,
    ErrorCode,
    RegistrationError,
)
from driver.logbuffer.log_buffers import LogBuffers
from driver.ownership import OwnerWatch

if TYPE_CHECKING:
    from driver.config import ClientContext

__all__ = [
    "AvailableCounterHandler",
    "ClientConductor",
    "ErrorHandler",
    "PendingRequest",
    "PublicationErrorHandler",
    "UnavailableCounterHandler",
]

ErrorHandler = Callable[[BaseException], None]
AvailableCounterHandler = Callable[[CountersReader, int, int], object]
UnavailableCounterHandler = Callable[[CountersReader, int, int], object]
PublicationErrorHandler = Callable[[PublicationErrorResponse], object]

_IDLE_SLEEP_NS = 16_000_000
"""How often timeouts (keepalive, driver liveness, lingering mappings) are checked, as 1.15.1."""
_MAX_MESSAGES_PER_SERVICE = 32
_CHANNEL_STATUS_INITIALIZING = 0
_CHANNEL_STATUS_ACTIVE = 1
_NO_ID_ALLOCATED = -1


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


def _register_local(cnc: CncFile, client_id: int) -> local_clients.DriverKey | None:
    """Tell a driver of this process that ``client_id`` is one of its own (see ``driver.local_clients``)."""
    try:
        key = local_clients.driver_key(cnc.path, cnc.start_timestamp_ms)
    except OSError:  # the file already gone: the driver (if any) takes the client for another process's
        return None
    local_clients.add(key, client_id)
    return key


class _MappedLog:
    """A mapped log file shared by every resource of one registration, reference counted."""

    __slots__ = ("buffers", "key", "ref_count", "time_of_last_state_change_ns")

    def __init__(self, key: int, buffers: LogBuffers) -> None:
        self.key = key
        self.buffers = buffers
        self.ref_count = 0
        self.time_of_last_state_change_ns = 0


class ClientConductor:
    """Agent (``do_work``/``on_close``) plus the blocking and async request plumbing of one client."""

    role_name = "aeron-client-conductor"

    def __init__(
        self,
        context: ClientContext,
        cnc: CncFile,
        *,
        error_handler: ErrorHandler,
        available_image_handler: AvailableImageHandler | None = None,
        unavailable_image_handler: UnavailableImageHandler | None = None,
        available_counter_handler: AvailableCounterHandler | None = None,
        unavailable_counter_handler: UnavailableCounterHandler | None = None,
        publication_error_handler: PublicationErrorHandler | None = None,
        invoker_mode: bool = False,
        driver_invoker: Callable[[], object] | None = None,
        nano_clock: Callable[[], int] = time.monotonic_ns,
        epoch_clock: Callable[[], int] = _epoch_ms,
        owner_watch: OwnerWatch | None = None,
    ) -> None:
        self.lock = threading.RLock()
        self._owner_watch = owner_watch
        self._context = context
        self._cnc = cnc
        self._error_handler = error_handler
        self._default_available_image_handler = available_image_handler
        self._default_unavailable_image_handler = unavailable_image_handler
        self._available_counter_handler = available_counter_handler
        self._unavailable_counter_handler = unavailable_counter_handler
        self._publication_error_handler = publication_error_handler
        self.generation = cnc.generation
        self.images_mapped = 0
        """Images this client has mapped so far: one may hold frames that came before it was mapped."""
        self._current = cnc.generation is CncGeneration.CURRENT
        self._heartbeat_counter_id = _NO_ID_ALLOCATED
        self._invoker_mode = invoker_mode
        self._driver_invoker = driver_invoker
        self._nano_clock = nano_clock
        self._epoch_clock = epoch_clock
        self._driver_timeout_ms = context.driver_timeout_ms
        self._driver_timeout_ns = context.driver_timeout_ms * 1_000_000
        self._keepalive_interval_ns = context.keepalive_interval_ns
        self._resource_linger_ns = context.resource_linger_duration_ns
        self._inter_service_timeout_ns = cnc.client_liveness_timeout_ns

        self._ring = ManyToOneRingBuffer(cnc.to_driver_buffer)
        self.client_id = self._ring.next_correlation_id()
        self._local_key = _register_local(cnc, self.client_id)
        self._proxy = DriverProxy(self._ring, self.client_id, DoorbellRinger.open(context.aeron_dir))
        self._receiver = CopyBroadcastReceiver(BroadcastReceiver(cnc.to_clients_buffer))
        self._values = cnc.counters_values_buffer
        self.counters_reader = CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)

        self._resources: dict[int, Publication | Subscription | Counter] = {}
        self._logs: dict[int, _MappedLog] = {}
        self._lingering: deque[_MappedLog] = deque()
        """Released logs kept mapped a while, oldest first (each stamped when it joins the end)."""
        self._pending: dict[int, PendingRequest] = {}
        self._is_closed = False
        self._is_terminating = False
        self._in_callback = False
        self._termination_cause: BaseException | None = None
        now_ns = nano_clock()
        self._time_of_last_keepalive_ns = now_ns
        self._time_of_last_service_ns = now_ns

    # ------------------------------------------------------------------ agent

    @property
    def is_closed(self) -> bool:
        return self._is_closed

    @property
    def is_terminating(self) -> bool:
        return self._is_terminating

    @property
    def termination_cause(self) -> BaseException | None:
        """Why the client terminated on its own (driver timeout, client timeout), if it did."""
        return self._termination_cause

    def on_start(self) -> None:
        pass

    def do_work(self) -> int:
        if not self.lock.acquire(blocking=False):
            return 0
        try:
            if self._is_terminating or self._is_closed:
                raise AgentTerminationError("client conductor terminating")
            return self._service()
        finally:
            self.lock.release()

    def on_close(self) -> None:
        with self.lock:
            if self._is_closed:
                return
            self._is_closed = True
            self._force_close_resources()
            self._fail_all_pending(DriverClientError("Aeron client is closed"))
            for log in (*self._lingering, *self._logs.values()):
                log.buffers.close()
            self._lingering.clear()
            self._logs.clear()
            if not self._is_terminating:
                self._proxy.client_close()
            if self._proxy.doorbell is not None:
                self._proxy.doorbell.close()
            if self._owner_watch is not None:
                self._owner_watch.close()
            self._cnc.close()
            if self._local_key is not None:
                local_clients.discard(self._local_key, self.client_id)

    # ------------------------------------------------------------------ service

    def _service(self) -> int:
        """One duty cycle; the caller holds the lock."""
        work = 0
        try:
            work += self._check_timeouts(self._nano_clock())
            receive = self._receiver.receive
            on_message = self._on_message
            for _ in range(_MAX_MESSAGES_PER_SERVICE):
                if self._is_terminating or not receive(on_message):
                    break
                work += 1
        except (DriverTimeoutError, DriverClientTimeoutError) as exc:
            self._terminate(exc)
        except DriverError as exc:
            # Lapped by the broadcast (or a corrupt record): this client lost messages; Aeron closes it.
            self._terminate(exc)
        return work

    def _check_timeouts(self, now_ns: int) -> int:
        if now_ns - self._time_of_last_service_ns <= _IDLE_SLEEP_NS:
            return 0
        stalled = now_ns - self._time_of_last_service_ns > self._inter_service_timeout_ns
        self._time_of_last_service_ns = now_ns
        work = 0
        # Not serviced for longer than the driver's client liveness timeout: this process stalled (SIGSTOP, a
        # long pause). Aeron gives up here, assuming the driver timed the client out; but a driver that
        # stalled with us (embedded) or looked away did not, and one that did tells us: ON_CLIENT_TIMEOUT on
        # the broadcast (read below) or, today's drivers, our heartbeat counter gone. So prove liveness at once.
        if stalled or now_ns - self._time_of_last_keepalive_ns > self._keepalive_interval_ns:
            watch = self._owner_watch
            if watch is not None and not watch.owner_alive():
                raise DeadDriverError(f"the media driver's process (pid {self._cnc.pid}) is gone")
            heartbeat_ms = self._proxy.time_of_last_driver_keepalive_ms()
            if self._epoch_clock() > heartbeat_ms + self._driver_timeout_ms:
                raise DriverTimeoutError(f"MediaDriver keepalive older than {self._driver_timeout_ms} ms")
            if self._current:
                self._stamp_heartbeat()
            else:
                self._proxy.send_client_keepalive()
            self._time_of_last_keepalive_ns = now_ns
            # Not counted as work: a timer's housekeeping says nothing more is coming (an idle strategy that
            # sleeps longer once the client has been quiet would otherwise never find it quiet).
        if self._pending:
            self._drop_stale_requests(now_ns)
        lingering = self._lingering
        linger_ns = self._resource_linger_ns
        # Oldest first: only the expired head is looked at (a storm's closes left hundreds, scanned every 16 ms).
        while lingering and now_ns - lingering[0].time_of_last_state_change_ns > linger_ns:
            lingering.popleft().buffers.close()
            work += 1
        return work

    def _stamp_heartbeat(self) -> None:
        """Today's liveness: stamp the heartbeat counter the driver allocated for this client."""
        reader = self.counters_reader
        counter_id = self._heartbeat_counter_id
        if counter_id == _NO_ID_ALLOCATED:
            counter_id = reader.find_by_type_id_and_registration_id(CLIENT_HEARTBEAT_TYPE_ID, self.client_id)
            if counter_id == _NO_ID_ALLOCATED:
                return  # the driver has not seen a command from us yet, so it is not timing us
            self._heartbeat_counter_id = counter_id
        elif not (
            reader.get_counter_state(counter_id) == RECORD_ALLOCATED
            and reader.get_counter_type_id(counter_id) == CLIENT_HEARTBEAT_TYPE_ID
            and int.from_bytes(reader.get_counter_key(counter_id)[:8], "little", signed=True) == self.client_id
        ):  # one record read, not a scan of the file: a driver may hold thousands of counters
            raise DriverClientTimeoutError(f"unexpected close of heartbeat timestamp counter: {counter_id}")
        self._values.put_long_ordered(counter_id * COUNTER_LENGTH, self._epoch_clock())

    def _drop_stale_requests(self, now_ns: int) -> None:
        """Forget abandoned requests the driver never answered (one more driver timeout of grace)."""
        grace_ns = self._driver_timeout_ns
        stale = [
            correlation_id
            for correlation_id, request in self._pending.items()
            if request.abandoned and now_ns - request.deadline_ns > grace_ns
        ]
        for correlation_id in stale:
            del self._pending[correlation_id]

    def _terminate(self, cause: BaseException) -> None:
        if self._is_terminating or self._is_closed:
            return
        self._is_terminating = True
        self._termination_cause = cause
        self._force_close_resources()
        self._fail_all_pending(cause)
        self._handle_error(cause)

    def _handle_error(self, error: BaseException) -> None:
        try:
            self._error_handler(error)
        except Exception:
            pass

    def _fail_all_pending(self, error: BaseException) -> None:
        pending = list(self._pending.values())
        self._pending.clear()
        for request in pending:
            if not request.done:
                request.fail(error)

    def _force_close_resources(self) -> None:
        for resource in self._resources.values():
            if isinstance(resource, Subscription):
                for image in resource._internal_close():
                    self._release_log(image.correlation_id)
            elif isinstance(resource, Publication):
                resource._internal_close()
                self._release_log(resource.original_registration_id)
            else:
                resource._internal_close()
        self._resources.clear()

    # ------------------------------------------------------------------ driver events

    def _on_message(self, msg_type_id: int, body: memoryview) -> None:
        if msg_type_id == ResponseType.ON_AVAILABLE_IMAGE:
            self._on_available_image(ImageReady.decode(body))
        elif msg_type_id in (ResponseType.ON_PUBLICATION_READY, ResponseType.ON_EXCLUSIVE_PUBLICATION_READY):
            ready = PublicationReady.decode(body)
            request = self._pending.get(ready.correlation_id)
            if request is not None:
                self._on_new_publication(request, ready, msg_type_id == ResponseType.ON_EXCLUSIVE_PUBLICATION_READY)
        elif msg_type_id == ResponseType.ON_OPERATION_SUCCESS:
            request = self._pending.pop(OperationSucceeded.decode(body).correlation_id, None)
            if request is not None:
                request.complete(None)
        elif msg_type_id == ResponseType.ON_SUBSCRIPTION_READY:
            sub_ready = SubscriptionReady.decode(body)
            request = self._pending.pop(sub_ready.correlation_id, None)
            if request is not None:
                subscription = request.resource
                assert isinstance(subscription, Subscription)
                subscription.channel_status_id = sub_ready.channel_status_indicator_id
                self._complete(request, subscription)
        elif msg_type_id == ResponseType.ON_UNAVAILABLE_IMAGE:
            gone = ImageMessage.decode(body)
            self._on_unavailable_image(gone.correlation_id, gone.subscription_registration_id)
        elif msg_type_id == ResponseType.ON_ERROR:
            self._on_error(ErrorResponse.decode(body))
        elif msg_type_id == ResponseType.ON_COUNTER_READY:
            update = CounterUpdate.decode(body)
            request = self._pending.pop(update.correlation_id, None)
            if request is not None:
                counter = Counter(self, update.correlation_id, update.counter_id, self._counter_view(update.counter_id))
                self._resources[update.correlation_id] = counter
                self._complete(request, counter)
            self._on_counter(self._available_counter_handler, update)
        elif msg_type_id == ResponseType.ON_UNAVAILABLE_COUNTER:
            self._on_counter(self._unavailable_counter_handler, CounterUpdate.decode(body))
        elif msg_type_id == ResponseType.ON_CLIENT_TIMEOUT and ClientTimeout.decode(body).client_id == self.client_id:
            self._terminate(DriverClientTimeoutError(f"client {self.client_id} timed out by the driver"))
        elif msg_type_id in (CurrentCommandType.ON_STATIC_COUNTER, CurrentCommandType.ON_NEXT_AVAILABLE_SESSION_ID):
            # Both are (correlation id int64, int32); the request knows which it asked for.
            answer = StaticCounterResponse.decode(body)
            request = self._pending.pop(answer.correlation_id, None)
            if request is not None:
                request.complete(answer.counter_id)
        elif msg_type_id == CurrentCommandType.ON_PUBLICATION_ERROR:
            error = PublicationErrorResponse.decode(body)
            if error.registration_id in self._resources and self._publication_error_handler is not None:
                self._callback(self._publication_error_handler, error)
        # Anything else (another generation's messages) is not for this client: ignore it.

    def _complete(self, request: PendingRequest, resource: Publication | Subscription | Counter) -> None:
        if request.abandoned:
            # The async caller was cancelled: give the resource back instead of leaking it.
            self._release_quietly(resource)
            request.complete(None)
        else:
            request.complete(resource)

    def _counter_view(self, counter_id: int) -> AtomicBuffer:
        """An 8-byte window on one counter value; it keeps the cnc mapping alive while referenced."""
        return self._cnc.counter_value_window(counter_id)

    def _on_error(self, error: ErrorResponse) -> None:
        request = self._pending.pop(error.offending_correlation_id, None)
        if error.error_code == ErrorCode.CHANNEL_ENDPOINT_ERROR:
            # Keyed by a channel status counter id (1.15.1); today's Aeron also means a command whose
            # endpoint could not be opened (our driver answers a refused bind that way).
            self._on_channel_endpoint_error(error.offending_correlation_id, error.error_message)
        if request is None:
            return
        if isinstance(request.resource, Subscription):
            self._resources.pop(request.correlation_id, None)
            request.resource._internal_close()
        request.fail(
            RegistrationError(error.offending_correlation_id, error.error_code, error.error_message, self._current)
        )

    def _on_channel_endpoint_error(self, status_indicator_id: int, message: str) -> None:
        for registration_id, resource in list(self._resources.items()):
            if isinstance(resource, (Subscription, Publication)) and resource.channel_status_id == status_indicator_id:
                self._handle_error(ChannelEndpointError(f"channel endpoint {status_indicator_id}: {message}"))
                del self._resources[registration_id]
                if isinstance(resource, Subscription):
                    for image in resource._internal_close():
                        self._release_log(image.correlation_id)
                else:
                    resource._internal_close()
                    self._release_log(resource.original_registration_id)

    def _on_new_publication(self, request: PendingRequest, ready: PublicationReady, exclusive: bool) -> None:
        del self._pending[ready.correlation_id]
        channel = request.resource
        assert isinstance(channel, str)
        try:
            log = self._map_log(ready.registration_id, ready.log_file_name)
        except Exception as exc:
            request.fail(exc)
            return
        cls = ExclusivePublication if exclusive else ConcurrentPublication
        try:
            publication = cls(
                self,
                channel,
                ready.stream_id,
                ready.session_id,
                self._counter_view(ready.publication_limit_counter_id),
                ready.channel_status_indicator_id,
                log,
                ready.registration_id,
                ready.correlation_id,
            )
        except Exception as exc:
            self._release_log(ready.registration_id)
            request.fail(exc)
            return
        self._resources[ready.correlation_id] = publication
        self._complete(request, publication)

    def _on_available_image(self, ready: ImageReady) -> None:
        subscription = self._resources.get(ready.subscription_registration_id)
        if not isinstance(subscription, Subscription) or subscription.is_closed:
            return
        try:
            log = self._map_log(ready.correlation_id, ready.log_file_name)
        except Exception as exc:
            self._handle_error(exc)
            return
        image = Image(
            subscription,
            ready.session_id,
            self._counter_view(ready.subscriber_position_id),
            ready.subscriber_position_id,
            log,
            self._error_handler,
            ready.source_identity,
            ready.correlation_id,
        )
        handler = subscription.available_image_handler
        if handler is not None:
            self._callback(handler, image)
        subscription._add_image(image)
        self.images_mapped += 1

    def _on_unavailable_image(self, correlation_id: int, subscription_registration_id: int) -> None:
        subscription = self._resources.get(subscription_registration_id)
        if not isinstance(subscription, Subscription):
            return
        image = subscription._remove_image(correlation_id)
        if image is None:
            return
        self._release_log(correlation_id)
        handler = subscription.unavailable_image_handler
        if handler is not None:
            self._callback(handler, image)

    def _on_counter(self, handler: AvailableCounterHandler | None, update: CounterUpdate) -> None:
        if handler is not None:
            self._callback(handler, self.counters_reader, update.correlation_id, update.counter_id)

    def _callback(self, handler: Callable[..., object], *args: object) -> None:
        self._in_callback = True
        try:
            handler(*args)
        except Exception as exc:
            self._handle_error(exc)
        finally:
            self._in_callback = False

    # ------------------------------------------------------------------ log mappings

    def _map_log(self, key: int, path: str) -> LogBuffers:
        log = self._logs.get(key)
        if log is None:
            log = _MappedLog(key, LogBuffers.map(path))
            self._logs[key] = log
        log.ref_count += 1
        return log.buffers

    def _release_log(self, key: int) -> None:
        log = self._logs.get(key)
        if log is None:
            return
        log.ref_count -= 1
        if log.ref_count <= 0:
            del self._logs[key]
            log.time_of_last_state_change_ns = self._nano_clock()
            self._lingering.append(log)

    # ------------------------------------------------------------------ requests

    def _ensure_usable(self) -> None:
        if self._is_closed or self._is_terminating:
            cause = self._termination_cause
            if isinstance(cause, DriverTimeoutError):
                raise type(cause)(f"Aeron client is terminated: {cause}") from cause
            if cause is not None:
                raise DriverClientError(f"Aeron client is terminated: {cause}") from cause
            raise DriverClientError("Aeron client is closed")
        if self._in_callback:
            raise DriverClientError("reentrant calls are not permitted during callbacks")

    def _register(self, correlation_id: int, kind: str, resource: object = None) -> PendingRequest:
        request = PendingRequest(correlation_id, kind, self._nano_clock() + self._driver_timeout_ns, resource)
        self._pending[correlation_id] = request
        return request

    def begin_add_publication(self, channel: str, stream_id: int, exclusive: bool) -> PendingRequest:
        """Send ADD_(EXCLUSIVE_)PUBLICATION; the caller holds the lock."""
        self._ensure_usable()
        correlation_id = self._proxy.add_publication(channel, stream_id, exclusive=exclusive)
        return self._register(correlation_id, "exclusive publication" if exclusive else "publication", channel)

    def begin_add_subscription(
        self,
        channel: str,
        stream_id: int,
        available_image_handler: AvailableImageHandler | None,
        unavailable_image_handler: UnavailableImageHandler | None,
    ) -> PendingRequest:
        self._ensure_usable()
        correlation_id = self._proxy.add_subscription(channel, stream_id)
        subscription = Subscription(
            self,
            channel,
            stream_id,
            correlation_id,
            available_image_handler if available_image_handler is not None else self._default_available_image_handler,
            unavailable_image_handler
            if unavailable_image_handler is not None
            else self._default_unavailable_image_handler,
        )
        self._resources[correlation_id] = subscription
        return self._register(correlation_id, "subscription", subscription)

    def begin_add_counter(self, type_id: int, key: bytes, label: str) -> PendingRequest:
        self._ensure_usable()
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"key length {len(key)} exceeds {MAX_KEY_LENGTH}")
        if len(label) > MAX_LABEL_LENGTH:
            raise ValueError(f"label length {len(label)} exceeds {MAX_LABEL_LENGTH}")
        return self._register(self._proxy.add_counter(type_id, key, label), "counter")

    def _require_current(self, what: str) -> None:
        if not self._current:
            raise DriverClientError(
                f"{what} needs a driver of today's generation (this one writes CnC {self.generation.label})"
            )

    def begin_add_static_counter(self, type_id: int, registration_id: int, key: bytes, label: str) -> PendingRequest:
        self._ensure_usable()
        self._require_current("add_static_counter")
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"key length {len(key)} exceeds {MAX_KEY_LENGTH}")
        if len(label) > MAX_LABEL_LENGTH:
            raise ValueError(f"label length {len(label)} exceeds {MAX_LABEL_LENGTH}")
        return self._register(self._proxy.add_static_counter(type_id, registration_id, key, label), "static counter")

    def begin_next_session_id(self, stream_id: int) -> PendingRequest:
        self._ensure_usable()
        self._require_current("next_available_session_id")
        return self._register(self._proxy.next_available_session_id(stream_id), "next available session id")

    def begin_destination(self, registration_id: int, channel: str, *, add: bool, receive: bool) -> PendingRequest:
        self._ensure_usable()
        if add:
            correlation_id = self._proxy.add_destination(registration_id, channel, receive=receive)
        else:
            correlation_id = self._proxy.remove_destination(registration_id, channel, receive=receive)
        return self._register(correlation_id, "destination")

    def await_response(self, request: PendingRequest) -> object:
        """Block until the driver answered ``request`` (driving the conductor meanwhile); bounded."""
        sleep_s = 0.0
        driver_invoker = self._driver_invoker
        while True:
            if driver_invoker is not None:
                driver_invoker()  # an INVOKER-mode driver in this process answers only when run
            with self.lock:
                if not request.done:
                    self._service()
                if request.done:
                    return request.outcome()
                if self._nano_clock() - request.deadline_ns > 0:
                    self._give_up(request)
                    raise DriverTimeoutError(
                        f"no response from the driver within {self._driver_timeout_ms} ms "
                        f"({request.kind}, correlation id {request.correlation_id})"
                    )
            time.sleep(sleep_s)
            sleep_s = min(sleep_s * 2 or 0.000_05, 0.001)

    def try_service(self, request: PendingRequest) -> bool:
        """Non-blocking step for async waiters: service if the lock is free; True once answered.

        Raises DriverTimeoutError once the request's deadline has passed.
        """
        if request.done:
            return True
        if self._driver_invoker is not None:
            self._driver_invoker()
        if self.lock.acquire(blocking=False):
            try:
                if not request.done:
                    self._service()
                if not request.done and self._nano_clock() - request.deadline_ns > 0:
                    self._give_up(request)
                    raise DriverTimeoutError(
                        f"no response from the driver within {self._driver_timeout_ms} ms "
                        f"({request.kind}, correlation id {request.correlation_id})"
                    )
            finally:
                self.lock.release()
        return request.done

    def abandon(self, request: PendingRequest) -> None:
        """An async waiter was cancelled: release the resource now or when the answer arrives."""
        with self.lock:
            if request.done:
                result = request.result
                if isinstance(result, (Publication, Subscription, Counter)):
                    self._release_quietly(result)
            else:
                request.abandoned = True

    def _give_up(self, request: PendingRequest) -> None:
        """Timed out: a late answer should release whatever it creates."""
        request.abandoned = True
        if isinstance(request.resource, Subscription):
            # The subscription object stays registered so a late ON_SUBSCRIPTION_READY can release it.
            request.resource._internal_close()

    # ------------------------------------------------------------------ releases

    def _release_quietly(self, resource: Publication | Subscription | Counter) -> None:
        """Release without waiting for the driver's answer (used from the service loop)."""
        if isinstance(resource, Subscription):
            for image in resource._internal_close():
                self._release_log(image.correlation_id)
            self._resources.pop(resource.registration_id, None)
            correlation_id = self._proxy.remove_subscription(resource.registration_id)
        elif isinstance(resource, Publication):
            resource._internal_close()
            if self._resources.pop(resource.registration_id, None) is resource:
                self._release_log(resource.original_registration_id)
            correlation_id = self._proxy.remove_publication(resource.registration_id)
        else:
            resource._internal_close()
            self._resources.pop(resource.registration_id, None)
            correlation_id = self._proxy.remove_counter(resource.registration_id)
        self._register(correlation_id, "release").abandoned = True

    def _begin_release(self, resource: Publication | Subscription | Counter) -> PendingRequest | None:
        with self.lock:
            if resource.is_closed:
                return None
            if self._is_closed or self._is_terminating:
                return None
            if self._in_callback:
                raise DriverClientError("reentrant calls are not permitted during callbacks")
            if isinstance(resource, Subscription):
                images = resource._internal_close()
                self._resources.pop(resource.registration_id, None)
                correlation_id = self._proxy.remove_subscription(resource.registration_id)
                for image in images:
                    self._release_log(image.correlation_id)
                    handler = resource.unavailable_image_handler
                    if handler is not None:
                        self._callback(handler, image)
            elif isinstance(resource, Publication):
                resource._internal_close()
                if self._resources.pop(resource.registration_id, None) is not resource:
                    return None
                self._release_log(resource.original_registration_id)
                correlation_id = self._proxy.remove_publication(resource.registration_id)
            else:
                resource._internal_close()
                if self._resources.pop(resource.registration_id, None) is None:
                    return None
                correlation_id = self._proxy.remove_counter(resource.registration_id)
            return self._register(correlation_id, f"remove {type(resource).__name__}")

    def release_publication(self, publication: Publication) -> None:
        request = self._begin_release(publication)
        if request is not None:
            self.await_response(request)

    def release_subscription(self, subscription: Subscription) -> None:
        request = self._begin_release(subscription)
        if request is not None:
            self.await_response(request)

    def release_counter(self, counter: Counter) -> None:
        request = self._begin_release(counter)
        if request is not None:
            self.await_response(request)

    def begin_release(self, resource: Publication | Subscription | Counter) -> PendingRequest | None:
        """Start a release for an async caller (who then waits with :meth:`try_service`)."""
        return self._begin_release(resource)

    # ------------------------------------------------------------------ queries

    def channel_status(self, channel_status_id: int) -> int:
        if channel_status_id == 0:
            return _CHANNEL_STATUS_INITIALIZING
        if channel_status_id == _NO_ID_ALLOCATED:
            return _CHANNEL_STATUS_ACTIVE
        return self.counters_reader.get_counter_value(channel_status_id)

    def time_of_last_driver_keepalive_ms(self) -> int:
        return self._proxy.time_of_last_driver_keepalive_ms()


def __getattr__(name: str) -> type[DriverClientError]:
    # ``ClientError`` was defined here until it moved to driver.errors as DriverClientError
    # (endpoint.errors.ClientError is the end point's).
    if name == "ClientError":
        warnings.warn(
            "driver.client.conductor.ClientError is deprecated: use driver.errors.DriverClientError",
            DeprecationWarning,
            stacklevel=2,
        )
        return DriverClientError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
