"""Typed errors of the end point layer.

Everything a user can catch derives from :class:`EndpointError`. A client that
the server turns away gets :class:`ClientRejectedError` with a
:class:`RejectReason`, never a hang; listener failures reach ``on_error``
listeners wrapped in nothing (the original exception) so they can be told apart.
"""

from __future__ import annotations

import enum

__all__ = [
    "AllocationError",
    "ClientError",
    "ClientRejectedError",
    "ClientTimeoutError",
    "ConfigurationError",
    "ConnectionClosedError",
    "CriticalDriverError",
    "DriverUnavailableError",
    "EndpointClosedError",
    "EndpointError",
    "HandshakeError",
    "MessageTooLargeError",
    "RejectReason",
    "SerializationError",
    "ServerError",
    "TransmitError",
]


class EndpointError(Exception):
    """Base of every error the end point layer raises."""


class ConfigurationError(EndpointError, ValueError):
    """A configuration field has a value outside what is allowed; the message names both."""


class SerializationError(EndpointError):
    """A message could not be encoded (unregistered type) or decoded (malformed or unknown type id)."""


class AllocationError(EndpointError):
    """No session or stream id is free in the configured range."""


class HandshakeError(EndpointError):
    """A handshake packet was malformed, forged or replayed (counted and dropped; raised only by codecs)."""


class RejectReason(enum.IntEnum):
    """Why a server turned a client away; carried in the handshake's REJECT message."""

    SERVER_FULL = 1
    TOO_MANY_FROM_ADDRESS = 2
    FILTERED = 3
    SERIALIZATION_MISMATCH = 4
    VERSION_MISMATCH = 5
    IDS_EXHAUSTED = 6
    SHUTTING_DOWN = 7
    SERVER_KEY_CHANGED = 8
    """Raised on the client itself: the server's public key differs from the one stored on first use."""


class ClientError(EndpointError):
    """A client could not connect."""


class ClientRejectedError(ClientError):
    """The server answered the handshake with a rejection (or its key changed); retrying will not help."""

    def __init__(self, reason: RejectReason, message: str) -> None:
        super().__init__(f"{reason.name}: {message}")
        self.reason = reason
        self.detail = message


class ClientTimeoutError(ClientError, TimeoutError):
    """No server answered within the connect timeout (after the configured retries)."""


class ServerError(EndpointError):
    """A server could not bind or serve."""


class EndpointClosedError(EndpointError):
    """The end point is closed (or closing); nothing more can be started on it."""


class ConnectionClosedError(EndpointError):
    """The connection is closed; ``reason`` says why (the peer's close reason when it gave one)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class TransmitError(EndpointError):
    """A message could not be handed to the driver (back pressure outlasted the send timeout)."""


class MessageTooLargeError(TransmitError, ValueError):
    """The encoded message is longer than the connection's maximum message length."""


class DriverUnavailableError(EndpointError):
    """No driver could be started or reached on the end point's directory (the cause says why)."""


class CriticalDriverError(EndpointError):
    """The driver under an end point failed (lost heartbeat, channel endpoint or network error).

    Every ``on_error`` listener is told with this error; the connections on that
    driver are closed without a disconnect message and the driver is restarted.
    """
