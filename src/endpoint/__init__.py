"""High-level asyncio Server/Client end points over the driver (dorkbox Network style)."""

from endpoint.client import Client
from endpoint.config import ClientConfiguration, Configuration, ServerConfiguration
from endpoint.connection import Connection, UnhandledMessageError
from endpoint.errors import (
    AllocationError,
    BudgetExceededError,
    ClientError,
    ClientRejectedError,
    ClientTimeoutError,
    ConfigurationError,
    ConnectionClosedError,
    CriticalDriverError,
    DriverUnavailableError,
    EndpointClosedError,
    EndpointError,
    MalformedMessageError,
    MessageTooLargeError,
    ReconnectFailedError,
    RejectReason,
    SealError,
    SerializationError,
    ServerError,
    TransmitError,
)
from endpoint.listeners import add_global_error_listener, remove_global_error_listener
from endpoint.reconnect import Reconnecting
from endpoint.running import run
from endpoint.serialization import Serialization
from endpoint.server import Server

__all__ = [
    "AllocationError",
    "BudgetExceededError",
    "Client",
    "ClientConfiguration",
    "ClientError",
    "ClientRejectedError",
    "ClientTimeoutError",
    "Configuration",
    "ConfigurationError",
    "Connection",
    "ConnectionClosedError",
    "CriticalDriverError",
    "DriverUnavailableError",
    "EndpointClosedError",
    "EndpointError",
    "MalformedMessageError",
    "MessageTooLargeError",
    "ReconnectFailedError",
    "Reconnecting",
    "RejectReason",
    "SealError",
    "Serialization",
    "SerializationError",
    "Server",
    "ServerConfiguration",
    "ServerError",
    "TransmitError",
    "UnhandledMessageError",
    "add_global_error_listener",
    "remove_global_error_listener",
    "run",
]
