"""A client end point in its own process, for test_processes.py.

Connects, sends ``--count`` Num messages, counts the Acks, prints one line per
event (``connected <id> <ipc|udp>``, ``acked <n>``, ``closed <reason>``) and
then stays connected until ``--linger`` seconds pass (so the test can kill it)
or closes with ``--close-reason``. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

from endpoint import Client, ClientConfiguration
from support.endpoints import Ack, Num, make_serialization


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def main(args: argparse.Namespace) -> None:
    client = Client(
        ClientConfiguration(
            aeron_dir=args.aeron_dir,
            prefer_ipc=not args.udp,
            serialization=make_serialization(),
            ping_interval=0.2,
            peer_timeout=2.0,
        )
    )
    acked = asyncio.Event()
    count = 0

    def on_ack(conn: object, ack: Ack) -> None:
        nonlocal count
        count += 1
        if count == args.count:
            acked.set()

    client.on_message(Ack, on_ack)
    client.on_disconnect(lambda conn: say("closed", conn.close_reason or "-"))
    async with client:
        conn = await client.connect("127.0.0.1", args.port)
        say("connected", conn.id, "ipc" if conn.is_ipc else "udp")
        for i in range(args.count):
            await conn.send(Num(i))
        await asyncio.wait_for(acked.wait(), 30)
        say("acked", count)
        if args.close_reason:
            await conn.close(args.close_reason)
            return
        await asyncio.sleep(args.linger)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--udp", action="store_true")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--close-reason", default="")
    parser.add_argument("--linger", type=float, default=60.0)
    asyncio.run(main(parser.parse_args()))
