"""Inventory client: typed remote calls to ``rpc_service.py``, and a callback it answers mid-call.

::

    python examples/rpc_service.py --port 24021
    python examples/rpc_client.py --port 24021 [--udp] [--budget 50.00]

It connects (over IPC when it shares the service's driver directory, else
UDP), exposes an :class:`Approver` of its own, then goes through the inventory:
stocking and taking items, a remote ``KeyError`` and ``ValueError`` caught as
such, a call that times out (``with_timeout``), a reorder during which the
service calls back the approver (which turns down anything over ``--budget``),
and a one-way note. It exits 0 when every answer was the expected one.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from inventory import APPROVER_ID, INVENTORY_ID, Inventory, Item, make_serialization

import endpoint
from endpoint import Client, ClientConfiguration, ClientRejectedError, ClientTimeoutError, EndpointError
from endpoint.errors import RemoteError, RpcTimeoutError
from endpoint.rpc import with_timeout

__all__ = ["BudgetApprover", "main", "parse_args"]


class BudgetApprover:
    """Answers the service's ``approve`` callbacks: yes up to a budget."""

    def __init__(self, budget_cents: int) -> None:
        self.budget_cents = budget_cents
        self.asked = 0

    async def approve(self, sku: str, count: int, cost_cents: int) -> bool:
        self.asked += 1
        ok = cost_cents <= self.budget_cents
        verdict = "yes" if ok else f"no, over the budget of {self.budget_cents / 100:.2f}"
        print(f"  approver: asked to buy {count} x {sku} for {cost_cents / 100:.2f} -> {verdict}", flush=True)
        return ok


def describe(exc: BaseException) -> str:
    if isinstance(exc, RemoteError):  # the remote side's type, message (and traceback, not shown here)
        return f"remote {exc.remote_type}: {exc.remote_message}"
    return f"local {type(exc).__name__}: {exc}"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Call the inventory service.")
    p.add_argument("--host", default="127.0.0.1", help="the service's address (default: %(default)s)")
    p.add_argument("--port", type=int, default=24021, help="the service's port (default: %(default)s)")
    p.add_argument("--aeron-dir", default=None, help="driver directory; the service's one gives IPC")
    p.add_argument("--udp", action="store_true", help="use UDP even when IPC would be possible")
    p.add_argument("--budget", type=float, default=50.0, help="the approver's limit per purchase (default: 50.00)")
    p.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to find the service")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds each call may take (default: %(default)s)")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    config = ClientConfiguration(
        aeron_dir=args.aeron_dir,
        serialization=make_serialization(),
        prefer_ipc=not args.udp,
        connect_timeout=args.connect_timeout,
        rpc_timeout=args.timeout,  # the default bound of every call
    )
    client = Client(config)
    approver = BudgetApprover(round(args.budget * 100))
    client.rpc.expose(approver, APPROVER_ID)  # the service may call it on any of our connections
    problems: list[str] = []

    def expect(what: str, got: object, wanted: object) -> None:
        print(f"{what} -> {got!r}", flush=True)
        if got != wanted:
            problems.append(f"{what}: {got!r}, expected {wanted!r}")

    async with client:
        try:
            conn = await client.connect(args.host, args.port)
        except ClientRejectedError as exc:
            print(f"rpc client: rejected: {exc.reason.name}: {exc.detail}", flush=True)
            return 1
        except ClientTimeoutError:
            print(f"rpc client: no service at {args.host}:{args.port} (within {args.connect_timeout:g} s)", flush=True)
            return 1
        except EndpointError as exc:
            print(f"rpc client: cannot connect: {type(exc).__name__}: {exc}", flush=True)
            return 1
        print(f"rpc client: connected over {'ipc' if conn.is_ipc else 'udp'} as {conn.id}", flush=True)

        inventory = conn.rpc.proxy(Inventory, INVENTORY_ID)  # typed: inventory.add(...) is checked like any call
        try:
            expect("add(sword, 3)", await inventory.add(Item("sword", "Short sword", 1250), 3), 3)
            expect("add(shield, 2)", await inventory.add(Item("shield", "Round shield", 900), 2), 2)
            expect("take(sword, 1)", await inventory.take("sword", 1), 2)
            expect("find(shield)", await inventory.find("shield"), Item("shield", "Round shield", 900))
            # Several calls in flight at once on one connection: each answer finds its caller.
            counts = await asyncio.gather(*(inventory.add(Item("arrow", "Arrow", 25), 10) for _ in range(5)))
            expect("5 concurrent add(arrow, 10)", sorted(counts), [10, 20, 30, 40, 50])
            expect("stock()", await inventory.stock(), {"sword": 2, "shield": 2, "arrow": 50})

            try:
                await inventory.take("bow", 1)
                problems.append("take(bow) did not fail")
            except KeyError as exc:  # a RemoteError (RemoteKeyError) that is also a KeyError
                print(f"take(bow, 1) -> {describe(exc)}", flush=True)
            try:
                await inventory.take("sword", 10)
                problems.append("take(sword, 10) did not fail")
            except ValueError as exc:
                print(f"take(sword, 10) -> {describe(exc)}", flush=True)

            try:
                await with_timeout(inventory, 0.3).audit(30)  # the service would answer after 30 s
                problems.append("audit(30) did not time out")
            except RpcTimeoutError as exc:
                print(f"audit(30) with a 0.3 s timeout -> {type(exc).__name__}: {exc}", flush=True)

            # During reorder the service calls our approver and waits for its answer.
            expect("reorder(shield, 4)", await inventory.reorder("shield", 4), 6)  # 36.00: approved
            expect("reorder(sword, 10)", await inventory.reorder("sword", 10), 2)  # 125.00: declined
            expect("approver was asked", approver.asked, 2)

            await inventory.note("client done")  # one-way: returns once sent
            expect("audit(0)", await inventory.audit(0), 2 + 6 + 50)  # also proves the note went first
        except EndpointError as exc:
            problems.append(f"{type(exc).__name__}: {exc}")
        print(f"rpc client: {conn.rpc.calls_made} calls made, {conn.rpc.calls_served} served", flush=True)
        await conn.close("done")

    if problems:
        print("rpc client: unexpected answers:\n  " + "\n  ".join(problems), flush=True)
        return 1
    print("rpc client: all answers as expected", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return endpoint.run(lambda: run(args))  # Ctrl-C or SIGTERM: the connection closes gracefully


if __name__ == "__main__":
    sys.exit(main())
