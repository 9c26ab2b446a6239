"""Encodes the driver's answers and broadcasts them to every client.

Error codes go out in the table of the generation the driver writes: today's
clients read 0 as UNUSED and want GENERIC_ERROR as 11, 1.15.1 clients know 0-5.
"""

from __future__ import annotations

from driver.command.current import NextSessionIdResponse, PublicationErrorResponse, StaticCounterResponse
from driver.command.responses import (
    ClientTimeout,
    CounterUpdate,
    ErrorResponse,
    ImageMessage,
    ImageReady,
    OperationSucceeded,
    PublicationReady,
    SubscriptionReady,
)
from driver.command.types import CurrentCommandType, ResponseType
from driver.concurrent.broadcast import BroadcastTransmitter
from driver.errors import CurrentErrorCode, ErrorCode, wire_error_code

__all__ = ["ClientProxy"]


class ClientProxy:
    def __init__(self, transmitter: BroadcastTransmitter, current: bool = False) -> None:
        self._transmit = transmitter.transmit
        self.current = current

    def on_error(self, correlation_id: int, error_code: ErrorCode | CurrentErrorCode, message: str) -> None:
        code = wire_error_code(error_code, self.current)
        self._transmit(ResponseType.ON_ERROR, ErrorResponse(correlation_id, code, message[:4000]).encode())

    def on_static_counter(self, correlation_id: int, counter_id: int) -> None:
        self._transmit(CurrentCommandType.ON_STATIC_COUNTER, StaticCounterResponse(correlation_id, counter_id).encode())

    def on_next_available_session_id(self, correlation_id: int, session_id: int) -> None:
        body = NextSessionIdResponse(correlation_id, session_id).encode()
        self._transmit(CurrentCommandType.ON_NEXT_AVAILABLE_SESSION_ID, body)

    def on_publication_error(self, error: PublicationErrorResponse) -> None:
        """Only today's clients know this message; a 1.15.1-generation driver sends none."""
        if self.current:
            self._transmit(CurrentCommandType.ON_PUBLICATION_ERROR, error.encode())

    def on_publication_ready(
        self,
        *,
        correlation_id: int,
        registration_id: int,
        stream_id: int,
        session_id: int,
        log_file_name: str,
        publisher_limit_counter_id: int,
        channel_status_indicator_id: int,
        is_exclusive: bool,
    ) -> None:
        body = PublicationReady(
            correlation_id,
            registration_id,
            session_id,
            stream_id,
            publisher_limit_counter_id,
            channel_status_indicator_id,
            log_file_name,
        ).encode()
        msg_type = ResponseType.ON_EXCLUSIVE_PUBLICATION_READY if is_exclusive else ResponseType.ON_PUBLICATION_READY
        self._transmit(msg_type, body)

    def on_available_image(
        self,
        *,
        correlation_id: int,
        session_id: int,
        stream_id: int,
        subscription_registration_id: int,
        subscriber_position_id: int,
        log_file_name: str,
        source_identity: str,
    ) -> None:
        body = ImageReady(
            correlation_id,
            session_id,
            stream_id,
            subscription_registration_id,
            subscriber_position_id,
            log_file_name,
            source_identity,
        ).encode()
        self._transmit(ResponseType.ON_AVAILABLE_IMAGE, body)

    def on_unavailable_image(
        self, correlation_id: int, subscription_registration_id: int, stream_id: int, channel: str
    ) -> None:
        body = ImageMessage(correlation_id, subscription_registration_id, stream_id, channel).encode()
        self._transmit(ResponseType.ON_UNAVAILABLE_IMAGE, body)

    def on_operation_success(self, correlation_id: int) -> None:
        self._transmit(ResponseType.ON_OPERATION_SUCCESS, OperationSucceeded(correlation_id).encode())

    def on_subscription_ready(self, correlation_id: int, channel_status_indicator_id: int) -> None:
        body = SubscriptionReady(correlation_id, channel_status_indicator_id).encode()
        self._transmit(ResponseType.ON_SUBSCRIPTION_READY, body)

    def on_counter_ready(self, correlation_id: int, counter_id: int) -> None:
        self._transmit(ResponseType.ON_COUNTER_READY, CounterUpdate(correlation_id, counter_id).encode())

    def on_unavailable_counter(self, registration_id: int, counter_id: int) -> None:
        self._transmit(ResponseType.ON_UNAVAILABLE_COUNTER, CounterUpdate(registration_id, counter_id).encode())

    def on_client_timeout(self, client_id: int) -> None:
        self._transmit(ResponseType.ON_CLIENT_TIMEOUT, ClientTimeout(client_id).encode())
