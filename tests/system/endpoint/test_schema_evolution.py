"""Two versions of the message classes, in two processes: what may differ connects and talks both ways; what may
not is refused at the handshake, naming the class and the field.

The server (this process) has version 1: ``Move(seq, x, note="")`` and ``Chat(text)``. The client
(``versioned_peer.py``, its own process and driver, over UDP) has ``Move(seq, x, speed=1.0)``: ``note`` removed,
``speed`` added, both with defaults; or an incompatible ``Move``.
"""

from __future__ import annotations

import asyncio
import random
import string
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest

from endpoint import Client, RejectReason, SchemaMismatchError, Serialization
from support.endpoints import client_config, connected_client, running_server, server_config, wait_until
from support.logged_process import LoggedProcess

pytestmark = [pytest.mark.process]

PEER = Path(__file__).with_name("versioned_peer.py")


@attrs.define
class Move:
    seq: int
    x: float
    note: str = ""


@attrs.define
class Chat:
    text: str


def version_1() -> Serialization:
    ser = Serialization()
    ser.register(Move, type_id=1)
    ser.register(Chat, type_id=2)
    return ser


def spawn_peer(version: str, port: int, client_dir: Path, tmp_path: Path) -> LoggedProcess:
    args = [sys.executable, str(PEER), "--port", str(port), "--aeron-dir", str(client_dir), "--version", version]
    return LoggedProcess.spawn(args, tmp_path / f"peer-{version}.log")


async def test_a_field_added_and_one_removed_still_talk_both_ways(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    received: list[Any] = []
    async with running_server(server_config(aeron_dir, port, serialization=version_1())) as server:

        def echo_move(conn: Any, message: Move) -> None:
            received.append(message)
            conn.send_nowait(Move(message.seq + 1000, message.x * 2, note="from v1"))

        def echo_chat(conn: Any, message: Chat) -> None:
            received.append(message)
            conn.send_nowait(Chat(message.text.upper()))

        server.on_message(Move, echo_move)
        server.on_message(Chat, echo_chat)
        with spawn_peer("2", port, client_dir, tmp_path) as peer:
            await wait_until(lambda: peer.has("done"), 60, 0.02, "the version 2 client to get both answers")
            output = peer.output()
        # Version 1 read version 2's Move: ``speed`` ignored, ``note`` defaulted.
        assert received == [Move(7, 1.5, ""), Chat("hello")]
        # Version 2 read version 1's: ``note`` ignored, ``speed`` defaulted.
        assert "got MoveV2(seq=1007, x=3.0, speed=1.0)" in output
        assert "got Chat(text='HELLO')" in output
        assert server.rejections[RejectReason.SERIALIZATION_MISMATCH] == 0


@pytest.mark.parametrize(
    ("version", "field", "problem"),
    [
        ("bad-type", "x", "is float on the server but str on the client"),
        ("bad-field", "hp", "the client has it without a default"),
    ],
)
async def test_an_incompatible_version_is_refused_naming_the_class_and_field(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path, version: str, field: str, problem: str
) -> None:
    async with running_server(server_config(aeron_dir, port, serialization=version_1())) as server:
        with spawn_peer(version, port, client_dir, tmp_path) as peer:
            await wait_until(lambda: peer.has("rejected "), 60, 0.02, "the incompatible client to be refused")
            await wait_until(lambda: peer.process.poll() is not None, 30, 0.02, "the refused client to exit")
            line = next(line for line in peer.output().splitlines() if line.startswith("rejected "))
        assert line.startswith(f"rejected SchemaMismatchError 1 {__name__}.Move {field} ")
        assert problem in line
        assert server.rejections[RejectReason.SERIALIZATION_MISMATCH] == 1
        assert server.connections == []


def many_classes(seed: int, changed: bool = False) -> Serialization:
    """Enough classes, with names that do not compress, that the packed schemas overflow one handshake frame."""
    rng = random.Random(seed)
    ser = Serialization()
    for type_id in range(1, 81):
        names = ["".join(rng.choice(string.ascii_letters) for _ in range(24)) for _ in range(3)]
        kinds: list[type] = [int, str, float]
        if changed and type_id == 80:
            kinds[0] = bytes
        ser.register(
            attrs.make_class(f"C{type_id}", {n: attrs.field(type=k) for n, k in zip(names, kinds, strict=True)}),
            type_id=type_id,
        )
    return ser


async def test_schemas_too_big_for_the_handshake_need_equal_classes(aeron_dir: Path, port: int) -> None:
    assert len(many_classes(1).packed_schemas()) > 2000
    async with running_server(server_config(aeron_dir, port, serialization=many_classes(1))) as server:
        async with connected_client(client_config("ipc", aeron_dir, aeron_dir, serialization=many_classes(1)), port):
            pass  # equal classes: the hashes match, no schema needed
        client = Client(client_config("ipc", aeron_dir, aeron_dir, serialization=many_classes(1, changed=True)))
        try:
            with pytest.raises(SchemaMismatchError, match="did not fit") as info:
                await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            assert info.value.class_name == ""
        finally:
            await client.close()
        assert server.rejections[RejectReason.SERIALIZATION_MISMATCH] == 1
