"""Encodes the driver's answers and broadcasts them to every client."""

from __future__ import annotations

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
from driver.command.types import ResponseType
from driver.concurrent.broadcast import BroadcastTransmitter

__all__ = ["ClientProxy"]


class ClientProxy:
    def __init__(self, transmitter: BroadcastTransmitter) -> None:
        self._transmit = transmitter.transmit

    def on_error(self, correlation_id: int, error_code: int, message: str) -> None:
        self._transmit(ResponseType.ON_ERROR, ErrorResponse(correlation_id, int(error_code), message[:4000]).encode())

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
