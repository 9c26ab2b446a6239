"""High-level asyncio Server/Client end points over the driver (dorkbox Network style)."""

import logging as _logging

from endpoint.client import Client
from endpoint.config import ClientConfiguration, Configuration, ServerConfiguration
from endpoint.connection.buffered import Session
from endpoint.connection.shell import Connection
from endpoint.drivers import (
    DriverInfo,
    DriverStillRunningError,
    driver_info,
    ensure_stopped,
    in_use_by_others,
    is_running,
)
from endpoint.errors import (
    SEAL_FAILED,
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
    HandshakeError,
    MalformedMessageError,
    MessageTooLargeError,
    ReconnectFailedError,
    RejectReason,
    RemoteError,
    RpcError,
    RpcTimeoutError,
    SchemaMismatchError,
    SealError,
    SerializationError,
    ServerError,
    SessionBufferFullError,
    SessionExpiredError,
    StreamAbortedError,
    StreamCancelledError,
    StreamChecksumError,
    StreamError,
    TransmitError,
    UnhandledMessageError,
    UnknownMethodError,
    UnknownObjectError,
    UnsupportedEventLoopError,
)
from endpoint.gc_tuning import tune_gc
from endpoint.groups import Group
from endpoint.listeners import add_global_error_listener, remove_global_error_listener
from endpoint.reconnect import Reconnecting
from endpoint.running import run
from endpoint.serialization import Serialization
from endpoint.server import Server

__all__ = [
    "SEAL_FAILED",
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
    "Group",
    "HandshakeError",
    "MalformedMessageError",
    "MessageTooLargeError",
    "ReconnectFailedError",
    "Reconnecting",
    "RejectReason",
    "RemoteError",
    "RpcError",
    "RpcTimeoutError",
    "SchemaMismatchError",
    "SealError",
    "Serialization",
    "SerializationError",
    "Server",
    "ServerConfiguration",
    "ServerError",
    "Session",
    "SessionBufferFullError",
    "SessionExpiredError",
    "StreamAbortedError",
    "StreamCancelledError",
    "StreamChecksumError",
    "StreamError",
    "TransmitError",
    "UnhandledMessageError",
    "UnknownMethodError",
    "UnknownObjectError",
    "UnsupportedEventLoopError",
    "add_global_error_listener",
    "driver_info",
    "ensure_stopped",
    "in_use_by_others",
    "is_running",
    "remove_global_error_listener",
    "run",
    "tune_gc",
]

if not any(isinstance(h, _logging.NullHandler) for h in _logging.getLogger("endpoint").handlers):
    # A library logs, the application decides where to: without a handler of its own configured, nothing
    # falls through to logging's last-resort stderr handler.
    _logging.getLogger("endpoint").addHandler(_logging.NullHandler())
