"""Many clients of one process connecting to one server at once over UDP (a connect storm), for test_storm.py.

Prints ``connected K/N``, the clients' summed handshake counters (``discarded D``: connections made after an
answer and thrown away) and ``failed F`` with the first error, then stays until ``--linger`` seconds pass (the
test kills it by pid first). Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

from endpoint import Client, ClientConfiguration
from support.endpoints import make_serialization


async def main(args: argparse.Namespace) -> None:
    clients = [
        Client(
            ClientConfiguration(
                aeron_dir=args.aeron_dir,
                prefer_ipc=False,
                serialization=make_serialization(),
                handshake_timeout=args.handshake_timeout,
                connect_timeout=args.connect_timeout,
                close_timeout=0.25,
            )
        )
        for _ in range(args.clients)
    ]
    try:
        outcomes = await asyncio.gather(*(c.connect("127.0.0.1", args.port) for c in clients), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        print(f"connected {len(outcomes) - len(failed)}/{len(outcomes)}", flush=True)
        print(f"discarded {sum(c.handshake_stats.discarded for c in clients)}", flush=True)
        print(f"failed {len(failed)} {failed[0]!r}" if failed else "failed 0", flush=True)
        await asyncio.sleep(args.linger)
    finally:
        await asyncio.wait_for(asyncio.gather(*(c.close() for c in clients), return_exceptions=True), 30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", type=Path, required=True)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--handshake-timeout", type=float, default=1.0)
    parser.add_argument("--connect-timeout", type=float, default=60.0)
    parser.add_argument("--linger", type=float, default=60.0)
    asyncio.run(main(parser.parse_args()))
