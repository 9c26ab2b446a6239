"""A client end point with a driver of its own (``unique_aeron_dir``) in its own process, for test_shm_reclaim.py.

Connects over UDP, prints ``connected <driver directory>`` and stays until killed (bounded by ``--linger``).
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
    client = Client(
        ClientConfiguration(
            aeron_dir=args.aeron_dir, unique_aeron_dir=True, prefer_ipc=False, serialization=make_serialization()
        )
    )
    async with client:
        await client.connect("127.0.0.1", args.port)
        shared = client._shared
        print("connected", shared.aeron_dir if shared is not None else "-", flush=True)
        await asyncio.sleep(args.linger)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--linger", type=float, default=60.0)
    asyncio.run(main(parser.parse_args()))
