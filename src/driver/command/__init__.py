"""Client <-> driver command protocol: type ids and message codecs (Aeron 1.15.1 layouts).

Commands go client -> driver through the to-driver ring buffer, responses go
driver -> clients through the broadcast buffer; the record's ``msg_type_id``
says which codec reads the body. Each codec is a frozen attrs class with
``encode() -> bytes`` and ``decode(buf, offset=0, length=None)``; decoding
checks every length and raises :class:`driver.errors.MalformedCommandError`
naming the message and the field.
"""

from __future__ import annotations

from driver.command.messages import (
    CORRELATED_HEADER_LENGTH,
    Command,
    CorrelatedMessage,
    CounterMessage,
    DestinationMessage,
    PublicationMessage,
    RemoveMessage,
    SubscriptionMessage,
    decode_command,
)
from driver.command.responses import (
    ClientTimeout,
    CounterUpdate,
    ErrorResponse,
    ImageMessage,
    ImageReady,
    OperationSucceeded,
    PublicationReady,
    Response,
    SubscriptionReady,
    decode_response,
)
from driver.command.types import CommandType, CurrentCommandType, ResponseType

__all__ = [
    "CORRELATED_HEADER_LENGTH",
    "ClientTimeout",
    "Command",
    "CommandType",
    "CorrelatedMessage",
    "CounterMessage",
    "CounterUpdate",
    "CurrentCommandType",
    "DestinationMessage",
    "ErrorResponse",
    "ImageMessage",
    "ImageReady",
    "OperationSucceeded",
    "PublicationMessage",
    "PublicationReady",
    "RemoveMessage",
    "Response",
    "ResponseType",
    "SubscriptionMessage",
    "SubscriptionReady",
    "decode_command",
    "decode_response",
]
