"""The results of ``offer`` and ``try_claim``, where client code has always imported them from.

They live with the offer itself, in :mod:`driver.logbuffer.offer_result`.
"""

from __future__ import annotations

from driver.logbuffer.offer_result import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    OfferResult,
)

__all__ = ["ADMIN_ACTION", "BACK_PRESSURED", "CLOSED", "MAX_POSITION_EXCEEDED", "NOT_CONNECTED", "OfferResult"]
