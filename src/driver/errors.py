"""Typed errors of the driver package.

The data path (``offer``, ``try_claim``, ``poll``) never raises: it returns
Aeron's codes. Everything else raises one of these, and each message names the
field, the value and what is allowed.

Names that the end point's errors also use carry a ``Driver`` prefix here
(:class:`DriverConfigurationError`, :class:`DriverClientError`,
:class:`DriverClientTimeoutError`), so code
importing from both packages cannot catch the wrong one. The old names still
resolve, with a DeprecationWarning.
"""

from __future__ import annotations

import enum
import warnings

__all__ = [
    "ActiveDriverError",
    "AgentTerminationError",
    "Category",
    "ChannelEndpointError",
    "CncVersionError",
    "ControlProtocolError",
    "CurrentErrorCode",
    "DeadDriverError",
    "DriverClientError",
    "DriverClientTimeoutError",
    "DriverConfigurationError",
    "DriverError",
    "DriverTimeoutError",
    "ErrorCode",
    "InvalidChannelError",
    "MalformedCommandError",
    "MalformedFrameError",
    "RegistrationError",
    "StorageSpaceError",
    "error_code_name",
    "wire_error_code",
]


class Category(enum.Enum):
    FATAL = "fatal"
    ERROR = "error"
    WARN = "warn"


class ErrorCode(enum.IntEnum):
    """Error codes carried by ON_ERROR, as Aeron 1.15.1 numbers them."""

    GENERIC_ERROR = 0
    INVALID_CHANNEL = 1
    UNKNOWN_SUBSCRIPTION = 2
    UNKNOWN_PUBLICATION = 3
    CHANNEL_ENDPOINT_ERROR = 4
    UNKNOWN_COUNTER = 5


class CurrentErrorCode(enum.IntEnum):
    """Error codes carried by ON_ERROR as today's Aeron (CnC 0.2.0) numbers them.

    1-5 keep their 1.15.1 meaning; 0 became UNUSED and GENERIC_ERROR moved to 11.
    """

    UNUSED = 0
    INVALID_CHANNEL = 1
    UNKNOWN_SUBSCRIPTION = 2
    UNKNOWN_PUBLICATION = 3
    CHANNEL_ENDPOINT_ERROR = 4
    UNKNOWN_COUNTER = 5
    UNKNOWN_COMMAND_TYPE_ID = 6
    MALFORMED_COMMAND = 7
    NOT_SUPPORTED = 8
    UNKNOWN_HOST = 9
    RESOURCE_TEMPORARILY_UNAVAILABLE = 10
    GENERIC_ERROR = 11
    STORAGE_SPACE = 12
    IMAGE_REJECTED = 13
    PUBLICATION_REVOKED = 14


def wire_error_code(code: ErrorCode | CurrentErrorCode, current: bool) -> int:
    """The number to put in ON_ERROR for the generation in use.

    A 1.15.1 client knows only 0-5, so today's finer codes fall back to its
    GENERIC_ERROR (0); today's clients read 0 as UNUSED, so GENERIC is 11 there.
    """
    if isinstance(code, CurrentErrorCode):
        if current:
            return int(code)
        if code is CurrentErrorCode.GENERIC_ERROR or int(code) > int(ErrorCode.UNKNOWN_COUNTER):
            return int(ErrorCode.GENERIC_ERROR)
        return int(code)
    if current and code is ErrorCode.GENERIC_ERROR:
        return int(CurrentErrorCode.GENERIC_ERROR)
    return int(code)


def error_code_name(error_code: int, current: bool = False) -> str:
    """The name of an ON_ERROR code in the table of the generation in use."""
    try:
        return CurrentErrorCode(error_code).name if current else ErrorCode(error_code).name
    except ValueError:
        return f"code {error_code}"


class DriverError(Exception):
    """Base of every error raised by the driver package."""

    category: Category = Category.ERROR


class DriverConfigurationError(DriverError, ValueError):
    """A setting is invalid; the message names it and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        super().__init__(f"{field}={value!r} is invalid: {allowed}")
        self.field = field
        self.value = value
        self.allowed = allowed


class InvalidChannelError(DriverConfigurationError):
    """A channel URI (or one of its parameters) is invalid."""


class RegistrationError(DriverError):
    """The driver refused a command (answered ON_ERROR)."""

    def __init__(self, correlation_id: int, error_code: int, message: str, current: bool = False) -> None:
        name = error_code_name(error_code, current)
        super().__init__(f"{name}: {message} (correlation id {correlation_id})")
        self.error_code_name = name
        self.correlation_id = correlation_id
        self.error_code = error_code
        self.driver_message = message


class DriverClientError(DriverError):
    """The Aeron client is closed, or a call was made where it is not allowed (e.g. from a callback)."""


class DriverTimeoutError(DriverError, TimeoutError):
    """The driver stopped answering (no heartbeat or no response in time)."""

    category = Category.FATAL


class DriverClientTimeoutError(DriverTimeoutError):
    """The driver timed this client out because its keepalives stopped (Aeron's ClientTimeoutException)."""


class DeadDriverError(DriverTimeoutError):
    """The process that owned the driver directory is gone (its lock is free): no use waiting for its heartbeat.

    A DriverTimeoutError, so code that handles a silent driver handles a dead one the same way, only sooner.
    """


class CncVersionError(DriverError):
    """The cnc.dat file is of a version this code does not speak."""

    category = Category.FATAL


class ActiveDriverError(DriverError):
    """A live driver already owns the directory."""

    category = Category.FATAL


class StorageSpaceError(DriverError, OSError):
    """Not enough space to create a file the driver needs."""


class ChannelEndpointError(DriverError):
    """A network endpoint failed (bind, send, receive); critical for the channel.

    ``status_indicator_id`` names the endpoint's channel status counter when the
    failure happened on an open endpoint: the driver then marks that counter
    ERRORED and tells clients with ON_ERROR(CHANNEL_ENDPOINT_ERROR) keyed by it.
    """

    def __init__(self, message: str, status_indicator_id: int | None = None) -> None:
        super().__init__(message)
        self.status_indicator_id = status_indicator_id


class MalformedFrameError(DriverError):
    """A frame read from the network is invalid; counted and dropped, never raised out of an agent."""


class MalformedCommandError(DriverError):
    """A command read from the to-driver ring buffer is invalid."""


class AgentTerminationError(DriverError):
    """Raised inside an agent's duty cycle to stop its runner."""


class ControlProtocolError(DriverError):
    """A client command the driver cannot satisfy; sent back as ON_ERROR with its code."""

    def __init__(self, error_code: ErrorCode | CurrentErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


_RENAMED = {"ConfigurationError": DriverConfigurationError, "ClientTimeoutError": DriverClientTimeoutError}
"""Old name -> the class it now names; kept so code written against the old names keeps working."""


def __getattr__(name: str) -> type[DriverError]:
    renamed = _RENAMED.get(name)
    if renamed is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"driver.errors.{name} is deprecated: use {renamed.__name__} (endpoint.errors has its own {name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return renamed
