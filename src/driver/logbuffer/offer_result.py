"""The results of ``offer`` and ``try_claim`` other than a position: shared by the log appenders that compute
them, the publications that return them and the waiters that retry them."""

from __future__ import annotations

import enum

__all__ = ["ADMIN_ACTION", "BACK_PRESSURED", "CLOSED", "MAX_POSITION_EXCEEDED", "NOT_CONNECTED", "OfferResult"]


class OfferResult(enum.IntEnum):
    """Aeron's negative results of ``offer``/``try_claim`` (any result >= 0 is the new position)."""

    NOT_CONNECTED = -1
    """No subscriber is connected to the publication."""
    BACK_PRESSURED = -2
    """The slowest subscriber is a full window behind; retry later."""
    ADMIN_ACTION = -3
    """The log rotated (or was rotating); retry at once."""
    CLOSED = -4
    """The publication (or the client) is closed."""
    MAX_POSITION_EXCEEDED = -5
    """The stream has reached the largest position its term length allows."""


NOT_CONNECTED = OfferResult.NOT_CONNECTED
BACK_PRESSURED = OfferResult.BACK_PRESSURED
ADMIN_ACTION = OfferResult.ADMIN_ACTION
CLOSED = OfferResult.CLOSED
MAX_POSITION_EXCEEDED = OfferResult.MAX_POSITION_EXCEEDED
