"""Inventory service: remote objects over end point connections (RPC). Run it, then ``rpc_client.py``::

    python examples/rpc_service.py --port 24021
    python examples/rpc_client.py --port 24021

The service exposes one :class:`InventoryService` to every client under
``INVENTORY_ID`` (``server.rpc.expose``); clients call it through a proxy typed by
the ``Inventory`` Protocol of ``examples/inventory.py``. What it shows:

* methods may be ``async`` (``audit`` sleeps, others never suspend) or plain;
* an exception raised here reaches the caller as a ``RemoteError`` that is also
  the built-in type (``except KeyError`` works there);
* a caller that gives up (its timeout) cancels the invocation here: ``audit``
  sees ``CancelledError``;
* ``reorder`` calls back into its caller mid-call with
  ``current_connection().rpc.proxy(Approver, APPROVER_ID)`` (no deadlock: answers
  are read while calls run);
* ``note`` is one-way: the client does not wait for an answer.

``--once`` stops the service when its first client disconnects; Ctrl-C (or
SIGTERM) stops it any time. Either way every connection is closed gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from inventory import APPROVER_ID, INVENTORY_ID, Approver, Inventory, Item, make_serialization

import endpoint
from endpoint import Connection, Server, ServerConfiguration, ServerError
from endpoint.rpc import current_connection

__all__ = ["InventoryService", "main", "parse_args"]


class InventoryService:
    """The object behind the ``Inventory`` interface; one instance serves every client."""

    def __init__(self) -> None:
        self.items: dict[str, Item] = {}
        self.counts: dict[str, int] = {}
        self.calls = 0

    def add(self, item: Item, count: int) -> int:  # a plain function: answered on the spot
        self.calls += 1
        if count <= 0:
            raise ValueError(f"count must be positive, not {count}")
        self.items.setdefault(item.sku, item)
        self.counts[item.sku] = self.counts.get(item.sku, 0) + count
        return self.counts[item.sku]

    def take(self, sku: str, count: int) -> int:
        self.calls += 1
        have = self.counts[sku]  # an unknown sku raises KeyError: the caller gets RemoteKeyError
        if count > have:
            raise ValueError(f"only {have} of {sku!r} in stock, {count} asked for")
        self.counts[sku] = have - count
        return self.counts[sku]

    def find(self, sku: str) -> Item:
        self.calls += 1
        return self.items[sku]

    def stock(self) -> dict[str, int]:
        self.calls += 1
        return dict(self.counts)

    async def audit(self, seconds: float) -> int:
        self.calls += 1
        caller = current_connection()  # the connection whose call this is
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            print(f"inventory service: audit for client {caller.id} cancelled (the caller gave up)", flush=True)
            raise
        return sum(self.counts.values())

    async def reorder(self, sku: str, count: int) -> int:
        self.calls += 1
        item = self.items[sku]
        cost = item.price_cents * count
        # Call back into the caller while its call is still running here.
        approver = current_connection().rpc.proxy(Approver, APPROVER_ID, timeout=10)
        if await approver.approve(sku, count, cost):
            self.counts[sku] += count
            print(f"inventory service: reordered {count} x {sku} ({cost / 100:.2f}), approved", flush=True)
        else:
            print(f"inventory service: reorder of {count} x {sku} ({cost / 100:.2f}) declined", flush=True)
        return self.counts[sku]

    def note(self, text: str) -> None:  # one-way: nothing goes back
        self.calls += 1
        print(f"inventory service: note from client {current_connection().id}: {text}", flush=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Serve an inventory over end point RPC.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    p.add_argument("--port", type=int, default=24021, help="UDP port, also names the IPC stream (default: %(default)s)")
    p.add_argument("--aeron-dir", default=None, help="driver directory; clients sharing it connect over IPC")
    p.add_argument("--once", action="store_true", help="stop when the first client disconnects")
    return p.parse_args(argv)


async def serve(args: argparse.Namespace) -> int:
    config = ServerConfiguration(
        port=args.port, listen_address=args.host, aeron_dir=args.aeron_dir, serialization=make_serialization()
    )
    server = Server(config)
    service = InventoryService()
    # Exposed to every connection; interface= limits the remote methods to the Protocol's.
    server.rpc.expose(service, INVENTORY_ID, interface=Inventory)

    stop = asyncio.Event()  # --once; Ctrl-C and SIGTERM cancel serve() instead (endpoint.run)

    @server.on_connect
    def connected(conn: Connection) -> None:
        transport = "ipc" if conn.is_ipc else "udp"
        print(f"inventory service: client {conn.id} connected over {transport}", flush=True)

    @server.on_disconnect
    def disconnected(conn: Connection) -> None:
        print(
            f"inventory service: client {conn.id} left ({conn.close_reason or 'no reason given'}); "
            f"it made {conn.rpc.calls_served} calls, we made {conn.rpc.calls_made}",
            flush=True,
        )
        if args.once:
            stop.set()

    @server.on_error
    def error(conn: Connection | None, exc: BaseException) -> None:
        print(f"inventory service: error on {conn!r}: {type(exc).__name__}: {exc}", flush=True)

    try:
        await server.bind()
    except ServerError as exc:
        print(f"inventory service: {exc}", flush=True)
        return 1
    print(f"inventory service: listening on {args.host}:{args.port} (ipc+udp); Ctrl-C stops", flush=True)
    try:
        await stop.wait()
    finally:
        await server.close()
        print(f"inventory service: stopped after {service.calls} calls", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return endpoint.run(lambda: serve(args))


if __name__ == "__main__":
    sys.exit(main())
