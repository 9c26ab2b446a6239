"""Typed errors of the driver package.

The data path (``offer``, ``try_claim``, ``poll``) never raises: it returns
Aeron's codes. Everything else raises one of these, and each message names the
field, the value and what is allowed.
"""

from __future__ import annotations

import enum

__all__ = [
    "ActiveDriverError",
    "AgentTerminationError",
    "Category",
    "ChannelEndpointError",
    "ClientTimeoutError",
    "CncVersionError",
    "ConfigurationError",
    "ControlProtocolError",
    "DriverError",
    "DriverTimeoutError",
    "ErrorCode",
    "InvalidChannelError",
    "MalformedCommandError",
    "MalformedFrameError",
    "RegistrationError",
    "StorageSpaceError",
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


class DriverError(Exception):
    """Base of every error raised by the driver package."""

    category: Category = Category.ERROR


class ConfigurationError(DriverError, ValueError):
    """A setting is invalid; the message names it and what is allowed."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        super().__init__(f"{field}={value!r} is invalid: {allowed}")
        self.field = field
        self.value = value
        self.allowed = allowed


class InvalidChannelError(ConfigurationError):
    """A channel URI (or one of its parameters) is invalid."""


class RegistrationError(DriverError):
    """The driver refused a command (answered ON_ERROR)."""

    def __init__(self, correlation_id: int, error_code: int, message: str) -> None:
        try:
            name = ErrorCode(error_code).name
        except ValueError:
            name = f"code {error_code}"
        super().__init__(f"{name}: {message} (correlation id {correlation_id})")
        self.correlation_id = correlation_id
        self.error_code = error_code
        self.driver_message = message


class DriverTimeoutError(DriverError, TimeoutError):
    """The driver stopped answering (no heartbeat or no response in time)."""

    category = Category.FATAL


class ClientTimeoutError(DriverTimeoutError):
    """The driver timed this client out because its keepalives stopped."""


class CncVersionError(DriverError):
    """The cnc.dat file is of a version this code does not speak."""

    category = Category.FATAL


class ActiveDriverError(DriverError):
    """A live driver already owns the directory."""

    category = Category.FATAL


class StorageSpaceError(DriverError, OSError):
    """Not enough space to create a file the driver needs."""


class ChannelEndpointError(DriverError):
    """A network endpoint failed (bind, send); critical for the channel."""


class MalformedFrameError(DriverError):
    """A frame read from the network is invalid; counted and dropped, never raised out of an agent."""


class MalformedCommandError(DriverError):
    """A command read from the to-driver ring buffer is invalid."""


class AgentTerminationError(DriverError):
    """Raised inside an agent's duty cycle to stop its runner."""


class ControlProtocolError(DriverError):
    """A client command the driver cannot satisfy; sent back as ON_ERROR with its code."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
