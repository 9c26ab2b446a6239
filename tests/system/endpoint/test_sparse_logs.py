"""``sparse_logs``: the embedded driver's logs (publications and images, both ends of a UDP connection) are made
sparse by default, and allocated in full with ``sparse_logs=False``; messages flow either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from endpoint import Connection, Server
from support.endpoints import Ack, Move, client_config, connected_client, server_config, wait_until


def _logs(aeron_dir: Path) -> list[Path]:
    return [p for sub in ("publications", "images") for p in (aeron_dir / sub).glob("*.logbuffer")]


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


@pytest.mark.parametrize("sparse", [True, False], ids=["sparse", "allocated"])
async def test_connection_logs_are_sparse_unless_asked_otherwise(
    sparse: bool, aeron_dir: Path, client_dir: Path
) -> None:
    server = Server(server_config(aeron_dir, 0, sparse_logs=sparse))
    answers: list[Ack] = []

    @server.on_message(Move)
    async def echo(conn: Connection, msg: Move) -> None:
        await conn.send(Ack(msg.x + msg.y))

    async with server:
        config = client_config("udp", aeron_dir, client_dir, sparse_logs=sparse)
        async with connected_client(config, server.port) as (client, conn):
            client.on_message(Ack, lambda c, m: answers.append(m))
            await conn.send(Move(2, 3))
            await wait_until(lambda: answers, 10, what="the echo")
            for directory in (aeron_dir, client_dir):
                logs = _logs(directory)
                assert any(p.parent.name == "publications" for p in logs), directory
                assert any(p.parent.name == "images" for p in logs), directory
                full = [log for log in logs if _allocated(log) >= log.stat().st_size]
                if sparse:  # a message or two: a few pages written
                    assert all(_allocated(log) < log.stat().st_size // 2 for log in logs), directory
                else:  # handshake images stay sparse (anyone may send to that stream): the connection's are full
                    assert {log.parent.name for log in full} == {"publications", "images"}, directory
                    assert all(log in full for log in logs if log.parent.name == "publications"), directory
    assert answers == [Ack(5)]
