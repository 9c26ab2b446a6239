"""High-level asyncio Server/Client end points over the driver (dorkbox Network style)."""

from endpoint.client import Client
from endpoint.config import ClientConfiguration, Configuration, ServerConfiguration
from endpoint.connection import Connection, UnhandledMessageError
from endpoint.drivers import (
    DriverInfo,
    DriverStillRunningError,
    driver_info,
    ensure_stopped,
    in_use_by_others,
    is_running,
)
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
    RejectReason,
    SealError,
    SerializationError,
    ServerError,
    TransmitError,
)
from endpoint.listeners import add_global_error_listener, remove_global_error_listener
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
    "DriverInfo",
    "DriverStillRunningError",
    "DriverUnavailableError",
    "EndpointClosedError",
    "EndpointError",
    "MalformedMessageError",
    "MessageTooLargeError",
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
    "driver_info",
    "ensure_stopped",
    "in_use_by_others",
    "is_running",
    "remove_global_error_listener",
    "run",
]
