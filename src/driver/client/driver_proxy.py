"""Client -> driver commands, written into the to-driver ring buffer (Aeron 1.15.1 ``DriverProxy``).

Every command but the keepalive takes a fresh correlation id from the ring's
shared counter, so ids are unique across all clients of the driver; the driver
answers on the broadcast buffer with the same id.
"""

from __future__ import annotations

from driver.command import (
    CommandType,
    CorrelatedMessage,
    CounterMessage,
    DestinationMessage,
    PublicationMessage,
    RemoveMessage,
    SubscriptionMessage,
)
from driver.command.current import NextSessionIdMessage, StaticCounterMessage
from driver.command.types import CurrentCommandType
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.doorbell import DoorbellRinger
from driver.errors import DriverError

__all__ = ["NULL_VALUE", "DriverProxy"]

NULL_VALUE = -1


class DriverProxy:
    """Encodes commands for one client id and writes them to the driver."""

    __slots__ = ("_keepalive", "_ring", "client_id", "doorbell")

    def __init__(self, ring: ManyToOneRingBuffer, client_id: int, doorbell: DoorbellRinger | None = None) -> None:
        self._ring = ring
        self.client_id = client_id
        self._keepalive = CorrelatedMessage(client_id, 0).encode()
        self.doorbell = doorbell
        """Set when the driver is run by a host that sleeps (see :mod:`driver.doorbell`): commands ring it."""

    def time_of_last_driver_keepalive_ms(self) -> int:
        """The driver stamps the ring's consumer heartbeat (epoch ms) on every duty cycle."""
        return self._ring.consumer_heartbeat_time()

    def add_static_counter(self, type_id: int, registration_id: int, key: bytes, label: str) -> int:
        correlation_id = self._ring.next_correlation_id()
        body = StaticCounterMessage(self.client_id, correlation_id, registration_id, type_id, key, label).encode()
        self._write(CurrentCommandType.ADD_STATIC_COUNTER, body)
        return correlation_id

    def next_available_session_id(self, stream_id: int) -> int:
        correlation_id = self._ring.next_correlation_id()
        self._write(
            CurrentCommandType.GET_NEXT_AVAILABLE_SESSION_ID,
            NextSessionIdMessage(self.client_id, correlation_id, stream_id).encode(),
        )
        return correlation_id

    def _write(self, command: CommandType | CurrentCommandType, body: bytes) -> None:
        if not self._ring.write(command, body):
            raise DriverError(f"could not write {command.name} command: the to-driver buffer is full")
        if self.doorbell is not None and command is not CommandType.CLIENT_KEEPALIVE:
            self.doorbell.ring_if_parked()

    def add_publication(self, channel: str, stream_id: int, *, exclusive: bool = False) -> int:
        correlation_id = self._ring.next_correlation_id()
        body = PublicationMessage(self.client_id, correlation_id, stream_id, channel).encode()
        self._write(CommandType.ADD_EXCLUSIVE_PUBLICATION if exclusive else CommandType.ADD_PUBLICATION, body)
        return correlation_id

    def remove_publication(self, registration_id: int) -> int:
        return self._remove(CommandType.REMOVE_PUBLICATION, registration_id)

    def add_subscription(self, channel: str, stream_id: int) -> int:
        correlation_id = self._ring.next_correlation_id()
        body = SubscriptionMessage(self.client_id, correlation_id, stream_id, channel, NULL_VALUE).encode()
        self._write(CommandType.ADD_SUBSCRIPTION, body)
        return correlation_id

    def remove_subscription(self, registration_id: int) -> int:
        return self._remove(CommandType.REMOVE_SUBSCRIPTION, registration_id)

    def add_destination(self, registration_id: int, channel: str, *, receive: bool = False) -> int:
        correlation_id = self._ring.next_correlation_id()
        body = DestinationMessage(self.client_id, correlation_id, registration_id, channel).encode()
        self._write(CommandType.ADD_RCV_DESTINATION if receive else CommandType.ADD_DESTINATION, body)
        return correlation_id

    def remove_destination(self, registration_id: int, channel: str, *, receive: bool = False) -> int:
        correlation_id = self._ring.next_correlation_id()
        body = DestinationMessage(self.client_id, correlation_id, registration_id, channel).encode()
        self._write(CommandType.REMOVE_RCV_DESTINATION if receive else CommandType.REMOVE_DESTINATION, body)
        return correlation_id

    def add_counter(self, type_id: int, key: bytes, label: str) -> int:
        correlation_id = self._ring.next_correlation_id()
        body = CounterMessage(self.client_id, correlation_id, type_id, bytes(key), label).encode()
        self._write(CommandType.ADD_COUNTER, body)
        return correlation_id

    def remove_counter(self, registration_id: int) -> int:
        return self._remove(CommandType.REMOVE_COUNTER, registration_id)

    def send_client_keepalive(self) -> None:
        self._write(CommandType.CLIENT_KEEPALIVE, self._keepalive)

    def client_close(self) -> None:
        """Best effort: a full ring (dead driver) is not an error while closing."""
        self._ring.write(CommandType.CLIENT_CLOSE, CorrelatedMessage(self.client_id, NULL_VALUE).encode())

    def _remove(self, command: CommandType, registration_id: int) -> int:
        correlation_id = self._ring.next_correlation_id()
        self._write(command, RemoveMessage(self.client_id, correlation_id, registration_id).encode())
        return correlation_id
