"""A server end point in its own process, for test_processes.py: answers each Num with an Ack until killed.

Prints ``listening <port>`` once bound and ``connected <id>`` for each client; every wait is bounded
(``--linger`` seconds at most).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

from endpoint import Connection, Server
from support.endpoints import Ack, Num, server_config


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def main(args: argparse.Namespace) -> None:
    config = server_config(
        Path(args.aeron_dir),
        args.port,
        ping_interval=args.ping_interval,
        peer_timeout=args.peer_timeout,
        launch_driver=not args.attach,
    )
    server = Server(config)
    server.on_connect(lambda conn: say("connected", conn.id))

    def on_num(conn: Connection, num: Num) -> None:
        conn.send_nowait(Ack(num.i))

    server.on_message(Num, on_num)
    async with server:
        await server.bind()
        say("listening", args.port)
        await asyncio.sleep(args.linger)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--attach", action="store_true", help="attach to a running driver, start none")
    parser.add_argument("--ping-interval", type=float, default=0.2)
    parser.add_argument("--peer-timeout", type=float, default=1.0)
    parser.add_argument("--linger", type=float, default=60.0)
    asyncio.run(main(parser.parse_args()))
