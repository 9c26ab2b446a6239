"""The Aeron client: connect to a media driver through its directory, publish and subscribe.

``driver.client.Aeron`` speaks the Aeron 1.15.1 client protocol, so it works with
the real Java 1.15.1 media driver as well as with ``driver.core``::

    with Aeron.connect(aeron_dir="/dev/shm/aeron-me") as aeron:
        publication = aeron.add_publication("aeron:ipc", 10)
        subscription = aeron.add_subscription("aeron:ipc", 10)
        publication.offer(b"hello")
        subscription.poll(lambda payload, header: print(bytes(payload)), 10)

Blocking calls are safe from any thread; every ``add_*`` has an ``*_async``
twin, publications have ``offer_async`` and subscriptions are async iterables of
``(payload, header)``.
"""

from __future__ import annotations

import warnings

from driver.client.aeron import Aeron, default_error_handler
from driver.client.conductor import ClientConductor
from driver.client.counter import Counter
from driver.client.publication import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    ConcurrentPublication,
    ExclusivePublication,
    OfferResult,
    Publication,
)
from driver.client.subscription import Image, Subscription
from driver.config import ClientContext
from driver.errors import DriverClientError
from driver.logbuffer.fragment_assembler import FragmentAssembler
from driver.logbuffer.header import BufferClaim, Header
from driver.logbuffer.reader import ControlledAction

__all__ = [
    "ADMIN_ACTION",
    "BACK_PRESSURED",
    "CLOSED",
    "MAX_POSITION_EXCEEDED",
    "NOT_CONNECTED",
    "Aeron",
    "BufferClaim",
    "ClientConductor",
    "ClientContext",
    "ConcurrentPublication",
    "ControlledAction",
    "Counter",
    "DriverClientError",
    "ExclusivePublication",
    "FragmentAssembler",
    "Header",
    "Image",
    "OfferResult",
    "Publication",
    "Subscription",
    "default_error_handler",
]


def __getattr__(name: str) -> type[DriverClientError]:
    # Renamed: endpoint.errors.ClientError is the end point's.
    if name == "ClientError":
        warnings.warn(
            "driver.client.ClientError is deprecated: use DriverClientError", DeprecationWarning, stacklevel=2
        )
        return DriverClientError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
