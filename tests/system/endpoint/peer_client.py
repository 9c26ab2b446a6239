"""A client end point in its own process, for test_processes.py.

Connects, sends ``--count`` Num messages, counts the Acks, prints one line per
event (``connected <id> <ipc|udp>``, ``acked <n>``, ``closed <reason>``) and
then stays connected until ``--linger`` seconds pass (so the test can kill it),
sending Num after Num all along with ``--keep-sending``, or closes with ``--close-reason``. Every wait is bounded.
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
            ping_interval=args.ping_interval,
            peer_timeout=args.peer_timeout,
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
        if args.keep_sending:  # mid-stream until killed (or until the linger time is up)
            say("streaming")
            deadline = asyncio.get_running_loop().time() + args.linger
            i = args.count
            while asyncio.get_running_loop().time() < deadline:
                await conn.send(Num(i), timeout=args.linger)
                i += 1
                if i % 64 == 0:
                    await asyncio.sleep(0.001)
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
    parser.add_argument("--keep-sending", action="store_true")
    parser.add_argument("--ping-interval", type=float, default=0.2)
    parser.add_argument("--peer-timeout", type=float, default=2.0)
    asyncio.run(main(parser.parse_args()))
