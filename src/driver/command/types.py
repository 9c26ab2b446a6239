"""Message type ids of the client <-> driver protocol.

The ids travel as the ``msg_type_id`` of a record in the to-driver ring buffer
(commands) or the to-clients broadcast buffer (responses); the record body is
one of the codecs in :mod:`driver.command.messages` or
:mod:`driver.command.responses`.

:class:`CommandType` and :class:`ResponseType` are exactly the ids Aeron 1.15.1
knows. :class:`CurrentCommandType` lists the ids today's Aeron added on top
(their codecs arrive with the CnC 512 generation); a 1.15.1-generation driver
treats them as unknown.
"""

from __future__ import annotations

import enum

__all__ = ["CommandType", "CurrentCommandType", "ResponseType"]


class CommandType(enum.IntEnum):
    """Client -> driver commands of Aeron 1.15.1."""

    ADD_PUBLICATION = 0x01
    REMOVE_PUBLICATION = 0x02
    ADD_EXCLUSIVE_PUBLICATION = 0x03
    ADD_SUBSCRIPTION = 0x04
    REMOVE_SUBSCRIPTION = 0x05
    CLIENT_KEEPALIVE = 0x06
    ADD_DESTINATION = 0x07
    REMOVE_DESTINATION = 0x08
    ADD_COUNTER = 0x09
    REMOVE_COUNTER = 0x0A
    CLIENT_CLOSE = 0x0B
    ADD_RCV_DESTINATION = 0x0C
    REMOVE_RCV_DESTINATION = 0x0D


class ResponseType(enum.IntEnum):
    """Driver -> client responses and events of Aeron 1.15.1."""

    ON_ERROR = 0x0F01
    ON_AVAILABLE_IMAGE = 0x0F02
    ON_PUBLICATION_READY = 0x0F03
    ON_OPERATION_SUCCESS = 0x0F04
    ON_UNAVAILABLE_IMAGE = 0x0F05
    ON_EXCLUSIVE_PUBLICATION_READY = 0x0F06
    ON_SUBSCRIPTION_READY = 0x0F07
    ON_COUNTER_READY = 0x0F08
    ON_UNAVAILABLE_COUNTER = 0x0F09
    ON_CLIENT_TIMEOUT = 0x0F0A


class CurrentCommandType(enum.IntEnum):
    """Ids added after 1.15.1 (commands 0x0E-0x12, responses 0x0F0B-0x0F0D); codecs come later."""

    TERMINATE_DRIVER = 0x0E
    ADD_STATIC_COUNTER = 0x0F
    REJECT_IMAGE = 0x10
    REMOVE_DESTINATION_BY_ID = 0x11
    GET_NEXT_AVAILABLE_SESSION_ID = 0x12
    ON_STATIC_COUNTER = 0x0F0B
    ON_PUBLICATION_ERROR = 0x0F0C
    ON_NEXT_AVAILABLE_SESSION_ID = 0x0F0D
