"""The inventory service's remote interfaces, shared by ``rpc_service.py`` and ``rpc_client.py``.

A remote interface is a ``typing.Protocol`` whose methods are ``async def``:
the caller gets a typed proxy with ``conn.rpc.proxy(Inventory, INVENTORY_ID)``
and awaits its methods; the callee exposes any object with those methods
(``server.rpc.expose(obj, INVENTORY_ID)``), whose methods may be plain or
``async`` functions. Arguments and results are whatever the end point's
serialization encodes: msgpack types (ints, str, lists, dicts...) and the attrs
classes registered below, so both programs build their Serialization with
:func:`make_serialization` (the handshake refuses a client whose registrations
differ).

Calls go both ways on one connection: during ``Inventory.reorder`` the service
calls back the client's :class:`Approver` (exposed by the client under
``APPROVER_ID``) and waits for its answer before it answers the client.
"""

from __future__ import annotations

from typing import Protocol

import attrs

from endpoint import Serialization
from endpoint.rpc import oneway

__all__ = ["APPROVER_ID", "INVENTORY_ID", "Approver", "Inventory", "Item", "make_serialization"]

INVENTORY_ID = 1
"""Object id of the inventory, exposed by the service to every client."""
APPROVER_ID = 1
"""Object id of the approver, exposed by each client to the service (ids are per side, so 1 again is fine)."""


@attrs.define
class Item:
    """A catalogue entry; travels as a registered attrs class."""

    sku: str
    name: str
    price_cents: int


class Inventory(Protocol):
    """What the service offers."""

    async def add(self, item: Item, count: int) -> int:
        """Put ``count`` of ``item`` in stock (cataloguing it if new); returns how many are in stock now."""
        ...

    async def take(self, sku: str, count: int) -> int:
        """Take ``count`` out; returns what is left. KeyError for an unknown sku, ValueError when short."""
        ...

    async def find(self, sku: str) -> Item:
        """The catalogue entry of ``sku`` (KeyError when unknown)."""
        ...

    async def stock(self) -> dict[str, int]:
        """Every sku and how many are in stock."""
        ...

    async def audit(self, seconds: float) -> int:
        """A slow call: counts the stock for ``seconds`` before answering the number of items."""
        ...

    async def reorder(self, sku: str, count: int) -> int:
        """Order ``count`` more of ``sku`` if the caller's Approver agrees to the cost; returns the stock."""
        ...

    @oneway
    async def note(self, text: str) -> None:
        """Leave a note in the service's log: fire and forget, nothing is answered."""
        ...


class Approver(Protocol):
    """What a client offers the service: approving purchases, called back in the middle of ``reorder``."""

    async def approve(self, sku: str, count: int, cost_cents: int) -> bool: ...


def make_serialization() -> Serialization:
    """Both sides register the same classes under the same ids."""
    serialization = Serialization()
    serialization.register(Item, type_id=1)
    return serialization
