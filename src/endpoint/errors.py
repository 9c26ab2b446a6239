"""Typed errors of the end point layer.

Everything a user can catch derives from :class:`EndpointError`. A client that
the server turns away gets :class:`ClientRejectedError` with a
:class:`RejectReason`, never a hang; listener failures reach ``on_error``
listeners wrapped in nothing (the original exception) so they can be told apart.
"""

from __future__ import annotations

import enum

__all__ = [
    "SEAL_FAILED",
    "AllocationError",
    "BudgetExceededError",
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
    "MalformedMessageError",
    "MessageTooLargeError",
    "ReconnectFailedError",
    "RejectReason",
    "RemoteError",
    "RpcError",
    "RpcTimeoutError",
    "SchemaMismatchError",
    "SealError",
    "SerializationError",
    "ServerError",
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
]


class EndpointError(Exception):
    """Base of every error the end point layer raises."""


class ConfigurationError(EndpointError, ValueError):
    """A configuration field has a value outside what is allowed; the message names both."""


class SerializationError(EndpointError):
    """A message could not be encoded (unregistered type) or decoded (malformed or unknown type id)."""


class MalformedMessageError(SerializationError):
    """The peer sent an empty message or a malformed internal one (ping, RPC or stream control): dropped,
    counted in ``connection.malformed_messages`` and reported to ``on_error`` with the connection."""


class SealError(EndpointError):
    """A sealed message did not open: forged, replayed, truncated or under the wrong key.

    On a connection it closes the connection (close reason starting with ``SEAL_FAILED``), is counted in
    ``connection.seal_failures`` and ``endpoint.seal_failures``, and reaches ``on_error`` with the connection."""


SEAL_FAILED = "seal failed"
"""Start of the close reason of a connection closed because a message of the peer's did not open."""


class BudgetExceededError(EndpointError):
    """A connection went over one of its budgets (large messages or streams in flight, their bytes, remote calls
    running here): only that work is dropped and counted; the connection stays up. ``budget`` names the
    configuration field that was exceeded."""

    def __init__(self, message: str, budget: str) -> None:
        super().__init__(message)
        self.budget = budget


class SessionBufferFullError(BudgetExceededError):
    """A buffered session already keeps as many messages (or bytes) as it may until the peer acknowledges them
    (``budget`` names the bound: ``max_buffered_messages`` or ``max_buffered_bytes``); the message was not kept.
    Raised at once while the session has no connection; while it has one, after waiting ``send_timeout`` for
    acknowledgements to make room."""


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
    SERVER_BUSY = 9
    """Too many handshakes at once: this one gave way to a newer one. Retrying may help."""


class ClientError(EndpointError):
    """A client could not connect."""


class ClientRejectedError(ClientError):
    """The server answered the handshake with a rejection (or its key changed).

    ``authenticated`` is False for a rejection anyone on the path could have sent (a hint, never a reason to stop
    reconnecting for good); ``retryable`` says whether trying again later may help.
    """

    def __init__(self, reason: RejectReason, message: str, *, authenticated: bool = True) -> None:
        super().__init__(f"{reason.name}: {message}" + ("" if authenticated else " (unauthenticated)"))
        self.reason = reason
        self.detail = message
        self.authenticated = authenticated

    @property
    def retryable(self) -> bool:
        return not self.authenticated or self.reason in (
            RejectReason.SERVER_FULL,
            RejectReason.TOO_MANY_FROM_ADDRESS,
            RejectReason.IDS_EXHAUSTED,
            RejectReason.SHUTTING_DOWN,
            RejectReason.SERVER_BUSY,
        )


class SchemaMismatchError(ClientRejectedError):
    """The server found the client's message classes incompatible with its own (SERIALIZATION_MISMATCH).

    ``class_name`` (the server's name for it), ``type_id`` and ``field`` say which; empty (0) when the server did
    not say (the client's schemas did not fit in the handshake, so only exact equality could be checked).
    See docs/endpoint.md for what may differ between versions.
    """

    def __init__(
        self, message: str, *, type_id: int = 0, class_name: str = "", field: str = "", authenticated: bool = True
    ) -> None:
        super().__init__(RejectReason.SERIALIZATION_MISMATCH, message, authenticated=authenticated)
        self.type_id = type_id
        self.class_name = class_name
        self.field = field


class ClientTimeoutError(ClientError, TimeoutError):
    """No server answered within the connect timeout (after the configured retries)."""


class ReconnectFailedError(ClientError):
    """``auto_reconnect`` gave up: ``reconnect_timeout`` ran out, or the server refused the client in a way retrying
    cannot fix (``permanent``: a serialization or version mismatch, a filter, a changed server key).

    Reaches the client's ``on_error`` listeners (with connection None); ``cause`` (also ``__cause__``) is the last
    attempt's failure, ``attempts`` how many were made, ``elapsed`` the seconds since the connection was lost,
    ``undelivered`` the messages kept for the new connection (``buffer_while_reconnecting``) and now dropped.
    """

    def __init__(
        self,
        message: str,
        *,
        cause: BaseException | None,
        attempts: int,
        elapsed: float,
        permanent: bool,
        undelivered: int = 0,
    ) -> None:
        super().__init__(message)
        self.cause = cause
        self.__cause__ = cause
        self.attempts = attempts
        self.elapsed = elapsed
        self.permanent = permanent
        self.undelivered = undelivered


class ServerError(EndpointError):
    """A server could not bind or serve."""


class EndpointClosedError(EndpointError):
    """The end point is closed (or closing); nothing more can be started on it."""


class ConnectionClosedError(EndpointError):
    """The connection is closed; ``reason`` says why (the peer's close reason when it gave one)."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class SessionExpiredError(ConnectionClosedError):
    """The buffered session is gone (ended by a graceful close, or no connection came back within its timeout):
    what it kept was dropped, and nothing more is kept for it."""


class UnhandledMessageError(EndpointError):
    """A message arrived for which no listener (not even a catch-all ``on_message()``) is registered.

    Reported to ``on_error`` (with the connection) only under ``on_unhandled="error"``; ``message_type`` is the
    class of the dropped message."""

    def __init__(self, message: str, message_type: type | None = None) -> None:
        super().__init__(message)
        self.message_type = message_type


class TransmitError(EndpointError):
    """A message could not be handed to the driver (back pressure outlasted the send timeout)."""


class MessageTooLargeError(TransmitError, ValueError):
    """The encoded message is longer than the connection's maximum message length."""


class UnsupportedEventLoopError(EndpointError, RuntimeError):
    """An end point was built or started where no asyncio event loop runs (under trio, say): end points need
    asyncio (anyio's asyncio backend is fine). ``library`` names what was running, None when nothing was."""

    def __init__(self, message: str, library: str | None = None) -> None:
        super().__init__(message)
        self.library = library


class DriverUnavailableError(EndpointError):
    """No driver could be started or reached on the end point's directory (the cause says why)."""


class CriticalDriverError(EndpointError):
    """The driver under an end point failed (lost heartbeat, channel endpoint or network error).

    Every ``on_error`` listener is told with this error; the connections on that
    driver are closed without a disconnect message and the driver is restarted.
    """


class RpcError(EndpointError):
    """A remote call failed on the way or on the other side."""


class RpcTimeoutError(RpcError, TimeoutError):
    """No answer to a remote call within its timeout (the remote side is told to cancel it)."""


class UnknownObjectError(RpcError, LookupError):
    """The peer exposes no object under the called id."""


class UnknownMethodError(RpcError, AttributeError):
    """The called object has no such remote method (or does not expose it)."""


class RemoteError(RpcError):
    """The remote method raised; the remote type name, message and traceback text come along.

    For built-in exception types the raised error also subclasses the built-in (``except KeyError`` works).
    """

    def __init__(self, remote_type: str, remote_message: str, remote_traceback: str = "") -> None:
        super().__init__(f"{remote_type}: {remote_message}" if remote_message else remote_type)
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback

    def __str__(self) -> str:
        text = f"{self.remote_type}: {self.remote_message}" if self.remote_message else self.remote_type
        if self.remote_traceback:
            text += "\n\nRemote traceback:\n" + self.remote_traceback.rstrip()
        return text


class StreamError(EndpointError):
    """A stream of chunks (a file, a large message) could not be sent or received whole."""


class StreamAbortedError(StreamError):
    """The sender gave up on the stream (cancelled, or its source failed); ``reason`` says why."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StreamCancelledError(StreamError):
    """The receiver declined or cancelled the stream; ``reason`` says why."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class StreamChecksumError(StreamError):
    """The bytes received do not match the sender's length or CRC-32."""
